"""Weight averaging as ``torch.optim.swa_utils``: AveragedModel, averaging functions, update_bn.

:class:`AveragedModel` holds an independent copy of a model (``.module``) and ``n_averaged``, a
device ``Buffer``; :meth:`AveragedModel.update_parameters` folds the model's current weights
into the copy with an averaging function: the equal-weight average of every update so far
(Stochastic Weight Averaging) by default, or an exponential moving average
(:func:`get_ema_multi_avg_fn`). It runs eagerly (one compiled program per structure) or inside a
``js.jit`` step that takes the AveragedModel as an argument, and never reads a value back to the
host: the first update copies the model, as torch's does, through ``jnp.where(n_averaged == 0,
...)`` instead of a Python branch on ``n_averaged``.

The arithmetic is torch 2.13's on the CPU: the per-tensor functions compute
``decay * ema + (1 - decay) * current`` and ``averaged + (current - averaged) / (n + 1)``; the
multi-tensor ones ``torch.lerp``'s two-sided formula with weight ``1 - decay`` or ``1 / (n + 1)``
(integer buffers through the per-tensor formula, truncated back to their dtype, as torch's
``copy_``). One difference in the interface: JAX arrays are immutable, so a ``multi_avg_fn``
returns the list of new averaged arrays instead of writing them in place.

js-optim does not import js-nn: :func:`update_bn` finds batch-norm layers by what they hold
(``running_mean`` and ``running_var`` Buffers and a ``momentum`` attribute).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.core  # jax.core.Tracer below; pyright knows a submodule only once imported
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

import js
from js import Buffer, Module
from js._checks import check_bool

from ._swalr import SWALR as SWALR

__all__ = [
    "SWALR",
    "AveragedModel",
    "get_ema_avg_fn",
    "get_ema_multi_avg_fn",
    "get_swa_avg_fn",
    "get_swa_multi_avg_fn",
    "update_bn",
]

AvgFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
MultiAvgFn = Callable[[Sequence[jax.Array], Sequence[jax.Array], jax.Array], list[jax.Array]]


def _check_decay(decay: Any) -> float:
    if isinstance(decay, bool) or not isinstance(decay, (int, float)):
        raise TypeError(f"decay must be a float in [0, 1], got {decay!r}. Fix: e.g. decay=0.999")
    if not 0.0 <= decay <= 1.0:
        raise ValueError(
            f"Invalid decay value {decay} provided. Please provide a value in [0,1] range."
        )
    return float(decay)


def _floating(x: jax.Array) -> bool:
    return jnp.issubdtype(x.dtype, jnp.inexact)


def _lerp(start: jax.Array, end: jax.Array, weight: jax.Array | float) -> jax.Array:
    """``torch.lerp``: ``start + w * (end - start)`` for ``|w| < 0.5``, else
    ``end - (end - start) * (1 - w)`` (exact at ``w = 1``)."""
    if isinstance(weight, float):  # a constant: the branch is known
        if abs(weight) < 0.5:
            return start + weight * (end - start)
        return end - (end - start) * (1 - weight)
    return jnp.where(
        jnp.abs(weight) < 0.5, start + weight * (end - start), end - (end - start) * (1 - weight)
    )


def _swa(averaged: jax.Array, current: jax.Array, num_averaged: jax.Array) -> jax.Array:
    return averaged + (current - averaged) / (num_averaged + 1)


class _Averaging:
    """An averaging function that compares by its kind and decay, so that two AveragedModels
    built with ``get_ema_avg_fn(0.999)`` each share one compiled update (a closure would
    compare by identity: a new program per model)."""

    def __init__(self, kind: str, decay: float | None = None) -> None:
        self.kind, self.decay = kind, decay

    def _key(self) -> tuple:
        return (type(self), self.kind, self.decay)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Averaging) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        decay = "" if self.decay is None else f"decay={self.decay}"
        return f"get_{self.kind}({decay})"


class _EMA(_Averaging):
    def __call__(self, ema: jax.Array, current: jax.Array, num_averaged: Any) -> jax.Array:
        decay = self.decay
        assert decay is not None
        return decay * ema + (1 - decay) * current


class _SWA(_Averaging):
    def __call__(self, averaged: jax.Array, current: jax.Array, num_averaged: Any) -> jax.Array:
        return _swa(averaged, current, num_averaged)


class _MultiEMA(_Averaging):
    def __call__(
        self, ema: Sequence[jax.Array], current: Sequence[jax.Array], num_averaged: Any
    ) -> list[jax.Array]:
        decay = self.decay
        assert decay is not None
        if _floating(ema[0]):  # torch._foreach_lerp_ with weight 1 - decay
            return [_lerp(e, c, 1 - decay) for e, c in zip(ema, current, strict=True)]
        return [e * decay + c * (1 - decay) for e, c in zip(ema, current, strict=True)]


class _MultiSWA(_Averaging):
    def __call__(
        self, averaged: Sequence[jax.Array], current: Sequence[jax.Array], num_averaged: Any
    ) -> list[jax.Array]:
        if _floating(averaged[0]):  # torch._foreach_lerp_ with weight 1 / (n + 1), a float32
            weight = 1 / (jnp.asarray(num_averaged) + 1).astype(jnp.float32)
            return [_lerp(a, c, weight) for a, c in zip(averaged, current, strict=True)]
        return [_swa(a, c, num_averaged) for a, c in zip(averaged, current, strict=True)]


def get_ema_multi_avg_fn(decay: float = 0.999) -> MultiAvgFn:
    """The exponential moving average over a list of arrays, as torch's.

    ``W_ema = lerp(W_ema, W_model, 1 - decay)`` (``torch._foreach_lerp_``) for floating arrays,
    ``W_ema * decay + W_model * (1 - decay)`` for integer ones. The function returns the new
    averaged arrays (JAX arrays are immutable; torch's writes them in place).

    Args:
        decay: the weight of the average so far, in ``[0, 1]`` (0.999).

    Returns:
        ``fn(averaged_list, current_list, num_averaged) -> new averaged_list``.

    Example:
        >>> import jax.numpy as jnp
        >>> fn = get_ema_multi_avg_fn(0.9)
        >>> [float(x) for x in fn([jnp.zeros(())], [jnp.ones(())], jnp.asarray(1))]
        [0.10000000149011612]
    """
    return _MultiEMA("ema_multi_avg_fn", _check_decay(decay))


def get_swa_multi_avg_fn() -> MultiAvgFn:
    """The equal-weight running average over a list of arrays, as torch's: ``lerp(W_avg,
    W_model, 1 / (n + 1))`` with ``n = num_averaged`` (integer arrays: ``W_avg + (W_model -
    W_avg) / (n + 1)``, truncated). Returns the new averaged arrays.

    Returns:
        ``fn(averaged_list, current_list, num_averaged) -> new averaged_list``.

    Example:
        >>> import jax.numpy as jnp
        >>> [float(x) for x in get_swa_multi_avg_fn()([jnp.zeros(())], [jnp.ones(())], 3)]
        [0.25]
    """
    return _MultiSWA("swa_multi_avg_fn")


def get_ema_avg_fn(decay: float = 0.999) -> AvgFn:
    """The exponential moving average of one array, as torch's: ``decay * W_ema + (1 - decay)
    * W_model``.

    Args:
        decay: the weight of the average so far, in ``[0, 1]`` (0.999).

    Returns:
        ``fn(averaged, current, num_averaged) -> new averaged``.

    Example:
        >>> import jax.numpy as jnp
        >>> float(get_ema_avg_fn(0.5)(jnp.zeros(()), jnp.ones(()), 1))
        0.5
    """
    return _EMA("ema_avg_fn", _check_decay(decay))


def get_swa_avg_fn() -> AvgFn:
    """The equal-weight running average of one array, as torch's: ``W_avg + (W_model - W_avg)
    / (n + 1)`` with ``n = num_averaged``.

    Returns:
        ``fn(averaged, current, num_averaged) -> new averaged``.

    Example:
        >>> import jax.numpy as jnp
        >>> float(get_swa_avg_fn()(jnp.zeros(()), jnp.ones(()), 3))
        0.25
    """
    return _SWA("swa_avg_fn")


def _pairs(copy_of: Module, model: Module, kind: str) -> list[tuple]:
    """``(averaged variable, model variable)`` of ``kind`` (``'parameters'`` or
    ``'buffers'``) by path (a deep copy may order them otherwise), after checking the paths
    agree."""
    named = "named_parameters" if kind == "parameters" else "named_buffers"
    mine, theirs = dict(getattr(copy_of, named)()), dict(getattr(model, named)())
    if mine.keys() != theirs.keys():
        missing = [path for path in mine if path not in theirs]
        extra = [path for path in theirs if path not in mine]
        raise ValueError(
            f"AveragedModel.update_parameters: the model's {kind} differ from the averaged "
            f"copy's: missing {missing}, unexpected {extra}. Fix: pass the model the "
            "AveragedModel was built from (or one of the same architecture)."
        )
    return [(variable, theirs[path]) for path, variable in mine.items()]


def _grouped(fn: MultiAvgFn, averaged: list, current: list, n: jax.Array) -> list:
    """``fn`` called once per dtype, as torch groups tensors by device and dtype."""
    out: list = [None] * len(averaged)
    groups: dict = {}
    for i, value in enumerate(averaged):
        groups.setdefault(jnp.dtype(value.dtype), []).append(i)
    for indices in groups.values():
        new = fn([averaged[i] for i in indices], [current[i] for i in indices], n)
        if len(new) != len(indices):
            raise ValueError(
                f"AveragedModel: multi_avg_fn returned {len(new)} arrays for {len(indices)}. "
                "Fix: return the list of new averaged arrays, one per input, in order."
            )
        for i, value in zip(indices, new, strict=True):
            out[i] = value
    return out


def _counter(model: Module) -> jax.Array:
    """A zero int32 count, replicated on the model's mesh when its arrays are placed on one
    (a count on one device beside arrays on several would not compile with them)."""
    zero = jnp.zeros((), jnp.int32)
    for _, variable in [*model.named_parameters(), *model.named_buffers()]:
        sharding = getattr(variable.value, "sharding", None)
        if isinstance(sharding, NamedSharding):
            return jax.device_put(zero, NamedSharding(sharding.mesh, PartitionSpec()))
    return zero


class AveragedModel(Module):
    """An averaged copy of a model for Stochastic Weight Averaging (SWA) or an exponential
    moving average (EMA), as ``torch.optim.swa_utils.AveragedModel``.

    ``.module`` is an independent copy of ``model`` (no array shared); ``n_averaged`` (an int32
    ``Buffer``, torch's int64) counts the updates. :meth:`update_parameters` copies the model on
    the first update and averages afterwards: with ``multi_avg_fn`` (per dtype group), else
    with ``avg_fn`` (per array), else the equal-weight average (torch's CPU arithmetic,
    ``W + (W_model - W) / (n + 1)``). With ``use_buffers=True`` the buffers are averaged too;
    otherwise they are copied from the model at every update. Calling the AveragedModel runs
    ``.module``. The averaging functions are static parts of the compiled programs: use the
    ``get_*`` functions (equal settings share programs) or a module-level function.

    Args:
        model: the ``js.Module`` to average.
        device: must be None: the copy stays where the model is (torch's ``device`` moves it).
        avg_fn: ``fn(averaged, current, num_averaged) -> new averaged``, per array.
        multi_avg_fn: ``fn(averaged_list, current_list, num_averaged) -> new averaged_list``.
        use_buffers: average the buffers too (False: copy them from the model).

    Example:
        >>> import jax.numpy as jnp, js
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.weight = js.Parameter(jnp.zeros(2))
        ...     def forward(self, x):
        ...         return x * self.weight.value
        >>> model = Scale()
        >>> swa = AveragedModel(model)
        >>> for w in (1.0, 2.0, 6.0):
        ...     model.weight.value = jnp.full(2, w)
        ...     swa.update_parameters(model)
        >>> swa.module.weight.value.tolist(), int(swa.n_averaged.value)
        ([3.0, 3.0], 3)
        >>> swa(jnp.ones(2)).tolist()
        [3.0, 3.0]
    """

    def __init__(
        self,
        model: Module,
        device: Any = None,
        avg_fn: AvgFn | None = None,
        multi_avg_fn: MultiAvgFn | None = None,
        use_buffers: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(model, Module):
            raise TypeError(f"AveragedModel: model must be a js.Module, got {type(model).__name__}")
        if device is not None:
            raise NotImplementedError(
                f"AveragedModel: device={device!r} is not supported; the averaged copy stays on "
                "the model's devices and sharding. Fix: leave device=None."
            )
        if avg_fn is not None and multi_avg_fn is not None:
            raise ValueError(
                "AveragedModel: only one of avg_fn and multi_avg_fn should be provided. Fix: "
                "pass one of them."
            )
        for name, fn in (("avg_fn", avg_fn), ("multi_avg_fn", multi_avg_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(
                    f"AveragedModel: {name} must be callable, got {type(fn).__name__}. Fix: "
                    f"e.g. {name}=get_ema_{name}(0.999)"
                )
        self.use_buffers = check_bool("AveragedModel", "use_buffers", use_buffers)
        self.module = copy.deepcopy(model)
        self.n_averaged = Buffer(_counter(model))
        self.avg_fn, self.multi_avg_fn = avg_fn, multi_avg_fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """``self.module(*args, **kwargs)``."""
        return self.module(*args, **kwargs)

    def update_parameters(self, model: Module) -> None:
        """Fold ``model``'s current weights into the average (eagerly or inside ``js.jit``).

        Eagerly it runs one compiled program (donating the averaged arrays); inside a compiled
        step it adds the update to that step's program. No value is read to the host.

        Args:
            model: the model being trained (the same structure as ``self.module``).
        """
        if not isinstance(model, Module):
            raise TypeError(
                f"AveragedModel.update_parameters: model must be a js.Module, got "
                f"{type(model).__name__}"
            )
        if isinstance(self.n_averaged.value, jax.core.Tracer):
            self._update(model)
        else:
            _update_program(self, model)

    def _update(self, model: Module) -> None:
        params = _pairs(self.module, model, "parameters")
        buffers = _pairs(self.module, model, "buffers")
        averaged = params + buffers if self.use_buffers else params
        n = self.n_averaged.value
        old = [a.value for a, _ in averaged]
        current = [m.value.astype(a.value.dtype) for a, m in averaged]
        if self.multi_avg_fn is not None:
            new = _grouped(self.multi_avg_fn, old, current, n)
        else:
            fn = self.avg_fn or _swa  # torch's default on the CPU (get_swa_avg_fn)
            new = [fn(a, c, n) for a, c in zip(old, current, strict=True)]
        for (variable, _), value, first in zip(averaged, new, current, strict=True):
            # torch copies the model at the first update and averages afterwards
            variable.value = jnp.where(n == 0, first, jnp.asarray(value).astype(first.dtype))
        if not self.use_buffers:
            for variable, source in buffers:
                variable.value = source.value.astype(variable.value.dtype)
        self.n_averaged.value = n + 1


@js.jit
def _update_program(averaged: AveragedModel, model: Module) -> None:
    averaged._update(model)


def _batch_norms(model: Module) -> list[Any]:
    """Layers holding ``running_mean`` and ``running_var`` Buffers and a ``momentum``."""
    return [
        module
        for module in model.modules()
        if isinstance(getattr(module, "running_mean", None), Buffer)
        and isinstance(getattr(module, "running_var", None), Buffer)
        and hasattr(module, "momentum")
    ]


def _reset(module: Any) -> None:
    """torch's ``reset_running_stats``: mean 0, variance 1, batch count 0."""
    reset = getattr(module, "reset_running_stats", None)
    if callable(reset):
        reset()
        return
    module.running_mean.value = jnp.zeros_like(module.running_mean.value)
    module.running_var.value = jnp.ones_like(module.running_var.value)
    count = getattr(module, "num_batches_tracked", None)
    if isinstance(count, Buffer):
        count.value = jnp.zeros_like(count.value)


def update_bn(loader: Iterable[Any], model: Module, device: Any = None) -> None:
    """Recompute the batch-norm running statistics of ``model`` with one pass over ``loader``.

    As torch's: every batch-norm layer's statistics are reset (mean 0, variance 1), the model
    runs in training mode on each batch (the first element of a tuple or list batch), the
    statistics become the cumulative average over the batches (torch's ``momentum=None``),
    then each layer's momentum and the model's mode are restored. A layer is any submodule
    with ``running_mean`` and ``running_var`` Buffers and a ``momentum`` attribute
    (``js.nn.BatchNorm1d``/``2d``); js.nn's layers refuse ``momentum=None``, so the cumulative
    average is their own update with momentum ``1/k`` at the ``k``-th batch, which is what
    torch's ``None`` computes. The layers' own statistic is what is averaged: js.nn's batch
    norm keeps the population (biased) variance, torch's the unbiased one. The forward runs
    eagerly (the momentum changes per batch).

    Args:
        loader: an iterable of batches: arrays, or tuples/lists whose first element is the
            input.
        model: the model (an :class:`AveragedModel` too).
        device: a ``jax.Device`` or ``Sharding`` to put each input on first (None: as is).

    Example:
        >>> import jax.numpy as jnp, js
        >>> class Norm(js.Module):  # the smallest batch norm; js.nn.BatchNorm1d in practice
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.momentum = 0.1
        ...         self.running_mean = js.Buffer(jnp.zeros(2))
        ...         self.running_var = js.Buffer(jnp.ones(2))
        ...     def forward(self, x):
        ...         m = self.momentum
        ...         self.running_mean.value = (1 - m) * self.running_mean.value + m * x.mean(0)
        ...         self.running_var.value = (1 - m) * self.running_var.value + m * x.var(0)
        ...         return x
        >>> model = Norm()
        >>> update_bn([jnp.ones((4, 2)), 3 * jnp.ones((4, 2))], model)
        >>> model.running_mean.value.tolist(), model.momentum, model.training
        ([2.0, 2.0], 0.1, True)
    """
    if not isinstance(model, Module):
        raise TypeError(f"update_bn: model must be a js.Module, got {type(model).__name__}")
    layers = _batch_norms(model)
    if not layers:
        return
    momenta = {id(layer): layer.momentum for layer in layers}
    for layer in layers:
        _reset(layer)
    was_training = model.training
    model.train()
    try:
        for k, batch in enumerate(loader, 1):
            x = batch[0] if isinstance(batch, (list, tuple)) else batch
            if device is not None:
                x = jax.device_put(x, device)
            for layer in layers:
                layer.momentum = 1.0 / k  # the running average of the k batches so far
            model(x)
    finally:
        for layer in layers:
            layer.momentum = momenta[id(layer)]
        model.train(was_training)
