"""WeightAveraging and EMAWeightAveraging: Lightning 2.6's callbacks over js.optim.swa_utils.

The callback keeps a :class:`js.optim.swa_utils.AveragedModel` of the task's model, updated
after training steps (``should_update(step_idx=...)``) and epochs (``should_update(epoch_idx=
...)``), each update one compiled program on the device (no value read back). Validation in a
fit runs with the averaged weights: the arrays of the model and of the average are exchanged
(references, not copies) before the validation batches and back after them. When training ends
the model is left holding (copies of) the averaged weights.

Order does not matter between this callback and ModelCheckpoint for the step updates: an update
due at the current step is made before a validation and before a checkpoint reads the average
(Lightning makes it in ``on_train_batch_end``, before both). For updates at epoch ends
(``should_update(epoch_idx=...)``), list this callback before ModelCheckpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from js._checks import check_bool, check_int
from js.optim.swa_utils import AveragedModel, get_ema_avg_fn

from ._callbacks import Callback
from ._protocol import TrainerView as Trainer  # the hooks' trainer: any TrainerView

if TYPE_CHECKING:  # the hooks' argument type (no cycle: _task imports no callback)
    from ._task import Task

_OPTIONS = ("avg_fn", "multi_avg_fn")


def _pairs(averaged, model) -> list[tuple]:
    """``(averaged variable, model variable)``: Parameters then Buffers, by path (the
    average's deep copy orders them otherwise)."""
    found = []
    for named in ("named_parameters", "named_buffers"):
        theirs = dict(getattr(model, named)())
        found += [(mine, theirs[path]) for path, mine in getattr(averaged, named)()]
    return found


class WeightAveraging(Callback):
    """Keep an averaged copy of the model (SWA or EMA), as Lightning 2.6's ``WeightAveraging``.

    After every training step for which :meth:`should_update` says so (by default every one)
    the average is updated with ``AveragedModel.update_parameters``, on the device (one small
    compiled program, no host read: ``trainer.transfers`` does not change); likewise after an
    epoch when ``should_update(epoch_idx=...)`` is True. Validation during ``fit`` runs with
    the averaged weights (and buffers), and when training ends the model holds the averaged
    weights. With ``steps_per_execution=K`` the Trainer sees the weights only after each
    dispatch: the average is updated once per dispatch, with the weights of its last step,
    when ``should_update`` is True for any step of it (use ``decay ** K`` for the same EMA).

    ModelCheckpoint saves add ``'averaged_model'`` (the averaged ``js.Module``, the model's
    keys: ``load_checkpoint(path, {'averaged_model': model})`` loads the averaged weights into a
    model for inference) and ``'weight_averaging'`` (this callback: ``n_averaged`` and the last
    update's step and epoch), while ``'model'`` keeps the trained weights. To resume, restore
    them with the rest: ``load_checkpoint(path, {**task.checkpoint_objects(),
    **averaging.checkpoint_objects(trainer, task), 'trainer': trainer, 'loader': loader})``
    and ``fit(..., resume=True)`` continues bit for bit. A fit that starts at step 0 starts a
    new average.

    Args:
        device: must be None: the average lives where the model does (Lightning's ``device``
            moves it).
        use_buffers: average the buffers too (True, as Lightning's; False copies them from the
            model at each update, leaving batch-norm statistics to ``update_bn``).
        **kwargs: ``avg_fn`` or ``multi_avg_fn`` for ``AveragedModel`` (default: the
            equal-weight average, SWA).

    Example:
        >>> from js.optim.swa_utils import get_ema_avg_fn
        >>> class EMAFrom100(WeightAveraging):
        ...     def __init__(self):
        ...         super().__init__(avg_fn=get_ema_avg_fn(0.999))
        ...     def should_update(self, step_idx=None, epoch_idx=None):
        ...         return step_idx is not None and step_idx >= 100
        >>> averaging = EMAFrom100()
    """

    def __init__(self, device: Any = None, use_buffers: bool = True, **kwargs: Any) -> None:
        owner = type(self).__name__
        if device is not None:
            raise NotImplementedError(
                f"{owner}: device={device!r} is not supported; the averaged model stays on the "
                "model's devices and sharding. Fix: leave device=None."
            )
        unknown = sorted(set(kwargs) - set(_OPTIONS))
        if unknown:
            raise TypeError(
                f"{owner}: unexpected arguments {unknown}; AveragedModel takes avg_fn or "
                "multi_avg_fn. Fix: pass one of those."
            )
        if all(kwargs.get(name) is not None for name in _OPTIONS):
            raise ValueError(
                f"{owner}: only one of avg_fn and multi_avg_fn should be provided. Fix: pass "
                "one of them."
            )
        self._use_buffers = check_bool(owner, "use_buffers", use_buffers)
        self._kwargs = kwargs
        self._average_model: AveragedModel | None = None
        self._source = None  # the model the average was made from
        # Lightning's: the global step of the last update (0: none yet) and its epoch (-1).
        self._latest_update_step = 0
        self._latest_update_epoch = -1
        self._asked = 0  # steps before this one were offered to should_update
        self._fitting = self._swapped = False

    @property
    def averaged_model(self) -> AveragedModel | None:
        """The :class:`AveragedModel` (its ``.module`` the averaged model), None before a fit."""
        return self._average_model

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to update the average after the step ``step_idx`` (counted from 0) or after
        the epoch ``epoch_idx``; one of them is given. Default: after every step.

        Args:
            step_idx: the index of the training step just run, or None at an epoch's end.
            epoch_idx: the index of the epoch just ended, or None after a step.

        Returns:
            True to update the average now.
        """
        return step_idx is not None

    # -- the average ----------------------------------------------------------------------------

    def _build(self, task: Task) -> AveragedModel:
        average = AveragedModel(task.model, use_buffers=self._use_buffers, **self._kwargs)
        self._average_model, self._source = average, task.model
        self._latest_update_step, self._latest_update_epoch = 0, -1
        return average

    def _catch_up(self, trainer: Trainer, task: Task) -> None:
        """The step update due now, unless made already (the steps of the last dispatch)."""
        step, first = trainer.global_step, self._asked
        self._asked = max(step, first)
        if self._average_model is None or step <= self._latest_update_step:
            return
        if any([self.should_update(step_idx=i) for i in range(first, step)]):
            self._average_model.update_parameters(task.model)
            self._latest_update_step = step

    def _swap(self, task: Task) -> None:
        assert self._average_model is not None
        for mine, theirs in _pairs(self._average_model.module, task.model):
            mine.value, theirs.value = theirs.value, mine.value

    # -- hooks ----------------------------------------------------------------------------------

    def on_fit_start(self, trainer: Trainer, task: Task) -> None:
        fresh = trainer.start_step == 0 and trainer.start_epoch == 0
        if fresh or self._average_model is None or self._source is not task.model:
            self._build(task)
        self._asked = trainer.start_step
        self._fitting = True

    def on_step_end(self, trainer: Trainer, task: Task, step: int) -> None:
        self._catch_up(trainer, task)

    def on_epoch_end(self, trainer: Trainer, task: Task, metrics: dict) -> None:
        epoch = trainer.epoch
        if (
            self._average_model is not None
            and epoch > self._latest_update_epoch
            and self.should_update(epoch_idx=epoch)
        ):
            self._average_model.update_parameters(task.model)
            self._latest_update_epoch = epoch

    def on_validation_epoch_start(self, trainer: Trainer, task: Task) -> None:
        if self._fitting and self._average_model is not None:
            self._catch_up(trainer, task)
            self._swap(task)
            self._swapped = True

    def on_validation_epoch_end(self, trainer: Trainer, task: Task) -> None:
        if self._swapped:
            self._swap(task)
            self._swapped = False

    def on_train_end(self, trainer: Trainer, task: Task) -> None:
        assert self._average_model is not None
        self._catch_up(trainer, task)
        for mine, theirs in _pairs(self._average_model.module, task.model):
            theirs.value = jnp.array(mine.value, copy=True)  # no array shared with the average

    def on_fit_end(self, trainer: Trainer, task: Task) -> None:
        self._fitting = False

    # -- checkpoints ----------------------------------------------------------------------------

    def checkpoint_objects(self, trainer: Trainer, task: Task) -> dict:
        """``{'averaged_model': the averaged module, 'weight_averaging': self}``: what each
        ModelCheckpoint save adds (the update due at this step made first), and what to pass
        to ``load_checkpoint`` before ``fit(..., resume=True)`` (outside a fit it makes the
        average from ``task.model`` to restore into).

        Args:
            trainer: the Trainer.
            task: the task whose model is averaged.

        Returns:
            The two checkpoint objects.
        """
        if self._fitting:
            self._catch_up(trainer, task)
        elif self._average_model is None or self._source is not task.model:
            self._build(task)
        assert self._average_model is not None
        return {"averaged_model": self._average_model.module, "weight_averaging": self}

    def state_dict(self) -> dict[str, Any]:
        """``n_averaged`` (on the device) and the step and epoch of the last update."""
        if self._average_model is None:
            raise RuntimeError(
                f"{type(self).__name__}.state_dict: there is no average yet. Fix: restore "
                "through checkpoint_objects(trainer, task), which makes one."
            )
        return {
            "n_averaged": self._average_model.n_averaged.value,
            "latest_update_step": self._latest_update_step,
            "latest_update_epoch": self._latest_update_epoch,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`."""
        if self._average_model is None:
            self.state_dict()  # the error naming the fix
        assert self._average_model is not None
        counter = self._average_model.n_averaged
        value = np.asarray(state_dict["n_averaged"], np.int32)
        counter.value = jax.device_put(value, counter.value.sharding)
        self._latest_update_step = int(state_dict["latest_update_step"])
        self._latest_update_epoch = int(state_dict["latest_update_epoch"])


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights, as Lightning 2.6's ``EMAWeightAveraging``.

    ``WeightAveraging`` with ``avg_fn=get_ema_avg_fn(decay)``, updated after the step
    ``step_idx`` when ``step_idx % update_every_n_steps == 0`` and ``step_idx >=
    update_starting_at_step`` (when given), and after every epoch from
    ``update_starting_at_epoch`` on (when given).

    Args:
        device: must be None (see :class:`WeightAveraging`).
        use_buffers: average the buffers too (True).
        decay: the EMA decay (0.999).
        update_every_n_steps: update every this many steps (1; 0 never by steps).
        update_starting_at_step: the first step index updated (None: from the start).
        update_starting_at_epoch: update at the end of this epoch and later ones (None: not
            at epoch ends).
        **kwargs: passed to :class:`WeightAveraging`.

    Example:
        >>> ema = EMAWeightAveraging(decay=0.99, update_starting_at_step=10)
        >>> ema.should_update(step_idx=9), ema.should_update(step_idx=10)
        (False, True)
    """

    def __init__(
        self,
        device: Any = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        update_starting_at_epoch: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            device=device, use_buffers=use_buffers, **kwargs, avg_fn=get_ema_avg_fn(decay=decay)
        )
        owner = type(self).__name__
        self.update_every_n_steps = check_int(
            owner, "update_every_n_steps", update_every_n_steps, 0
        )
        self.update_starting_at_step = (
            None
            if update_starting_at_step is None
            else check_int(owner, "update_starting_at_step", update_starting_at_step, 0)
        )
        self.update_starting_at_epoch = (
            None
            if update_starting_at_epoch is None
            else check_int(owner, "update_starting_at_epoch", update_starting_at_epoch, 0)
        )

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Lightning's rule: by steps from ``update_starting_at_step`` every
        ``update_every_n_steps``; at epoch ends from ``update_starting_at_epoch``.

        Args:
            step_idx: the index of the training step just run, or None.
            epoch_idx: the index of the epoch just ended, or None.

        Returns:
            True to update the average now.
        """
        if step_idx is not None:
            start = self.update_starting_at_step
            every = self.update_every_n_steps
            if (start is None or step_idx >= start) and every > 0 and step_idx % every == 0:
                return True
        if epoch_idx is not None:
            start_epoch = self.update_starting_at_epoch
            if start_epoch is not None and epoch_idx >= start_epoch:
                return True
        return False
