"""The numbers of a run: throughput, the compiled step's FLOPs and memory, MFU.

Every train row (a log's window, an epoch) gets, from numbers the Trainer already has on the
host (the window's sample count, its steps and its wall time):

- ``perf/samples_per_s``, ``perf/steps_per_s`` and, with ``tokens_per_sample``,
  ``perf/tokens_per_s``;
- ``perf/flops_per_step``: ``cost_analysis()['flops']`` of the programs the fit's first
  dispatch ran: with one step per dispatch, the ``js.jit`` programs ``task.training_step``
  called, summed when it called several (a step that calls none, one run eagerly, is traced
  once more as ``js.jit(task.training_step)`` for its figure); with ``steps_per_execution``
  K above 1 and ``unroll=True``, the K-step program's figure over K (a fully unrolled program
  counts every step; XLA's cost analysis counts a rolled ``lax.scan`` loop's body once, so
  with another ``unroll`` the figure comes from the fit's first one-step dispatch, if any);
- ``perf/mfu``: ``flops_per_step * steps_per_s / peak_flops`` (the model FLOPs utilisation);
- ``mem/program_bytes``: the compiled program's ``memory_analysis()``, ``argument + output +
  temp - alias`` bytes (the largest of a step's programs; the K-step program's with
  ``steps_per_execution`` above 1: the one that runs most);
- ``mem/peak_device_bytes``: the largest ``peak_bytes_in_use`` of the local devices'
  ``memory_stats()``, where the backend reports it (GPU, TPU; not the CPU).

Nothing here reads a device array or runs a compiled ``training_step`` again:
:func:`js.programs_run` records the compiled calls of the first dispatch of each kind, and
lowering them again with the same arguments takes JAX's cached trace and executable (no second
trace, no second compilation). Only an eager step, which compiled nothing, is traced once more
for its analysis. ``memory_stats()`` is a host call made at report rows only.
"""

from __future__ import annotations

import time
import warnings
import weakref
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

import js
from js._checks import is_int

from ._callbacks import Callback

# one_step_program's programs: task -> (its step and configuration, js.jit of its step).
_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# measure_peak_flops's results: (platform, device id, dtype, n) -> FLOP/s.
_PEAKS: dict[tuple, float] = {}


def measure_peak_flops(
    n: int | None = None,
    dtype: DTypeLike = jnp.float32,
    device: Any = None,
    *,
    repeats: int = 5,
) -> float:
    """The FLOP/s of one large square matmul on ``device``: best of ``repeats``, cached.

    ``2 n^3`` FLOPs of ``jnp.matmul`` on two ``[n, n]`` arrays of ``dtype`` at JAX's default
    precision (what a model's matmuls run at; on a GPU that may use TF32 for float32), timed
    after a warm-up call, the fastest of ``repeats`` calls counted. The result is kept for the
    process, per device, dtype and ``n``: a second call returns it without running anything.
    It is the reference for ``perf/mfu`` (``Trainer(peak_flops='measure')``): an achieved
    matmul rate, not the vendor's datasheet peak, so MFU against it reads "fraction of what
    this machine's matmul reaches"; pass a datasheet figure to ``Trainer(peak_flops=...)`` for
    the usual MFU.

    Args:
        n: the matrix size; None: 2048 on the CPU, 8192 on an accelerator.
        dtype: the operands' dtype (``jnp.float32``, ``jnp.bfloat16``, ...).
        device: the ``jax.Device`` to run it on; None: ``jax.devices()[0]``.
        repeats: timed calls (>= 1); the fastest counts.

    Returns:
        The measured FLOP/s, a positive float.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.training import measure_peak_flops
        >>> peak = measure_peak_flops(256, jnp.float32)
        >>> peak > 0 and measure_peak_flops(256, jnp.float32) == peak  # cached
        True
    """
    device = jax.devices()[0] if device is None else device
    if not callable(getattr(device, "memory_stats", None)):
        raise TypeError(f"measure_peak_flops: device must be a jax.Device, got {device!r}")
    if n is None:
        n = 2048 if device.platform == "cpu" else 8192
    if not is_int(n) or n < 1:
        raise ValueError(f"measure_peak_flops: n must be an int >= 1, got {n!r}")
    if not is_int(repeats) or repeats < 1:
        raise ValueError(f"measure_peak_flops: repeats must be an int >= 1, got {repeats!r}")
    dtype = jnp.dtype(dtype)
    key = (device.platform, device.id, dtype.name, int(n))
    if key in _PEAKS:
        return _PEAKS[key]
    rng = np.random.default_rng(0)
    a, b = (
        jax.device_put(jnp.asarray(rng.standard_normal((n, n)), dtype), device) for _ in range(2)
    )
    matmul = jax.jit(jnp.matmul)
    matmul(a, b).block_until_ready()  # compile and warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    _PEAKS[key] = 2.0 * float(n) ** 3 / max(best, 1e-12)
    return _PEAKS[key]


def check_perf_options(
    perf_metrics: object, peak_flops: object, tokens_per_sample: object
) -> tuple[bool, float | str | None, int | None]:
    """The Trainer's perf options, checked (a clear error before anything runs)."""
    if not isinstance(perf_metrics, bool):
        raise TypeError(f"Trainer perf_metrics must be True or False, got {perf_metrics!r}")
    if not (
        peak_flops is None
        or peak_flops == "measure"
        or (isinstance(peak_flops, (int, float)) and not isinstance(peak_flops, bool))
    ):
        raise TypeError(
            "Trainer peak_flops must be None, a number of FLOP/s (e.g. 989e12 for an H100's "
            f"bfloat16 datasheet peak) or 'measure', got {peak_flops!r}"
        )
    if isinstance(peak_flops, (int, float)) and not peak_flops > 0:
        raise ValueError(f"Trainer peak_flops must be > 0 FLOP/s, got {peak_flops!r}")
    if tokens_per_sample is not None and not (is_int(tokens_per_sample) and tokens_per_sample >= 1):
        raise TypeError(
            "Trainer tokens_per_sample must be None or an int >= 1 (a language model's "
            f"block size), got {tokens_per_sample!r}"
        )
    if not perf_metrics and (peak_flops is not None or tokens_per_sample is not None):
        raise ValueError(
            "Trainer: peak_flops and tokens_per_sample feed the perf/ columns, which "
            "perf_metrics=False turns off. Fix: drop them, or keep perf_metrics=True."
        )
    peak = float(peak_flops) if isinstance(peak_flops, (int, float)) else None
    if peak_flops == "measure":
        peak = "measure"
    tokens = int(tokens_per_sample) if tokens_per_sample is not None else None
    return perf_metrics, peak, tokens


def program_bytes(compiled: Any) -> int | None:
    """``argument + output + temp - alias`` bytes of a compiled program's
    ``memory_analysis()`` (the alias bytes are outputs written into donated arguments, counted
    once), or None when the backend gives no analysis."""
    memory = compiled.memory_analysis()
    if memory is None:
        return None
    return int(
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )


def flops(compiled: Any) -> float | None:
    """``cost_analysis()['flops']`` of a compiled program (None when not reported)."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
    value = cost.get("flops") if isinstance(cost, dict) else None
    return None if value is None or value < 0 else float(value)


def one_step_program(task) -> Any:
    """``js.jit(task.training_step)``, kept per task while its configuration is unchanged."""
    config = tuple(
        (name, id(value))
        for name, value in sorted(getattr(task, "__dict__", {}).items())
        if name not in ("model", "optimizer", "rngs")
    )
    key = (type(task).training_step, config)
    try:
        cached = _PROGRAMS.get(task)
    except TypeError:  # a task that cannot be weakly referenced: a new program per fit
        return js.jit(task.training_step)
    if cached is None or cached[0] != key:
        ref = weakref.ref(task)  # the program must not keep its task (the cache's key) alive

        def training_step(model, optimizer, rngs, batch):
            owner = ref()
            assert owner is not None  # lowered only while its task is being fitted
            return owner.training_step(model, optimizer, rngs, batch)

        cached = _PROGRAMS[task] = (key, js.jit(training_step))
    return cached[1]


def training_modes(model: Any) -> list[tuple[Any, bool]]:
    """Each module of ``model`` and its ``training`` flag (none for a model without modules)."""
    if not isinstance(model, js.Module):
        return []
    return [(module, module.training) for module in model.modules()]


class Recording(NamedTuple):
    """The first dispatch of a kind, while it runs: the open :func:`js.programs_run` block and
    its list, the dispatch's step count, task and batch, and the training modes it ran in."""

    block: Any
    ran: list
    steps: int
    task: Any
    batch: Any
    modes: list[tuple[Any, bool]]


def peak_device_bytes() -> int | None:
    """The largest ``peak_bytes_in_use`` over the local devices, None where not reported."""
    peaks = []
    for device in jax.local_devices():
        stats = device.memory_stats()
        if stats and "peak_bytes_in_use" in stats:
            peaks.append(int(stats["peak_bytes_in_use"]))
    return max(peaks) if peaks else None


class PerfColumns(Callback):
    """``Trainer(perf_metrics=True)``: the ``perf/*`` and ``mem/*`` columns of every train row.

    The Trainer's constructor installs it (after the user's callbacks). ``on_fit_start``
    takes the peak (``'measure'``: :func:`measure_peak_flops`, cached);
    ``on_train_batch_start`` opens :func:`js.programs_run` around the first dispatch of each
    kind (one step, K steps), and the dispatch's row (or ``on_step_end``) analyses what it
    recorded; every other dispatch costs a single truth test. The rows ask :meth:`columns`
    for an interval's columns.

    Args:
        peak: the peak FLOP/s for ``perf/mfu``, ``'measure'``, or None (no ``perf/mfu``).
        tokens: tokens per counted sample for ``perf/tokens_per_s``, or None.
        unroll: the Trainer's ``unroll`` (how the K-step program counts its steps).
    """

    def __init__(self, peak: float | str | None, tokens: int | None, unroll: int | bool = True):
        self.peak, self.tokens, self.unroll = peak, tokens, unroll
        self.flops_per_step: float | None = None
        self.program_bytes: int | None = None
        self.analysis_s = 0.0  # seconds spent lowering and compiling for the analysis
        self._pending: set[int] = set()
        self._several = False
        self._peak: float | None = None
        self._failure: Exception | None = None
        self._watch: Recording | None = None

    def on_fit_start(self, trainer: Any, task: Any) -> None:
        """A new fit: analyse its first one-step and (K > 1) K-step dispatch; the peak."""
        k = trainer.steps_per_execution
        self._close()
        self.flops_per_step = self.program_bytes = None
        self.analysis_s, self._failure = 0.0, None
        self._pending, self._several = {1, k}, k > 1
        if self.peak == "measure":
            self._peak = measure_peak_flops()
        else:
            self._peak = self.peak if isinstance(self.peak, float) else None

    def on_train_batch_start(self, trainer: Any, task: Any, batch: Any, steps: int) -> None:
        """Before a dispatch of ``steps`` steps: record its compiled calls when it is the
        first of its kind (analysed once it has run)."""
        if not self._pending or steps not in self._pending:
            return
        self._pending.discard(steps)
        block = js.programs_run()
        self._watch = Recording(
            block, block.__enter__(), steps, task, batch, training_modes(task.model)
        )

    def on_step_end(self, trainer: Any, task: Any, step: int) -> None:
        """After a dispatch's row: analyse the dispatch recorded, if no row did."""
        self._analyse()

    def on_validation_epoch_start(self, trainer: Any, task: Any) -> None:
        """Before a validation the dispatch reached: analyse it now, before the validation's
        own programs run, in the train mode the dispatch ran in (the Trainer has just switched
        the model to eval mode; a program lowered in another mode would be traced again).
        Only each module's ``training`` flag is put back and restored, not ``set_phase``."""
        if self._watch is None:
            return
        now = training_modes(task.model)
        for module, mode in self._watch.modes:  # as the dispatch ran
            module.training = mode
        try:
            self._analyse()
        finally:
            for module, mode in now:
                module.training = mode

    def on_fit_end(self, trainer: Any, task: Any) -> None:
        """Close a recording left open by a step that raised."""
        self._close()

    def _close(self) -> list:
        """End the open recording; its calls (empty when none was open)."""
        if self._watch is None:
            return []
        watch, self._watch = self._watch, None
        watch.block.__exit__(None, None, None)
        return watch.ran

    def _analyse(self) -> None:
        """Lower and compile the recorded dispatch's calls again: JAX's caches give back the
        trace and the executable the calls made, so nothing is traced or compiled twice."""
        if self._watch is None:
            return
        steps, task, batch = self._watch.steps, self._watch.task, self._watch.batch
        ran = self._close()
        started = time.perf_counter()
        try:
            if ran:
                compiled = [function.lower(*a, **kw).compile() for function, a, kw in ran]
            else:  # an eager step (the K-step program is always compiled): traced once more
                args = (task.model, task.optimizer, task.rngs)
                compiled = [one_step_program(task).lower(*args, batch).compile()]
            counted = [flops(program) for program in compiled]
            total = None if None in counted else float(sum(counted))  # type: ignore[arg-type]
            sizes = [size for size in map(program_bytes, compiled) if size is not None]
            if steps == 1:
                if self.flops_per_step is None:
                    self.flops_per_step = total
                if not self._several and sizes:
                    self.program_bytes = max(sizes)
            else:
                if self.flops_per_step is None and self.unroll is True and total is not None:
                    self.flops_per_step = total / steps
                self.program_bytes = max(sizes) if sizes else None
        except Exception as error:  # an analysis must never stop a fit
            # said at the first row: a step that fails itself raises its own error first
            self._pending.clear()
            self._failure = error
        self.analysis_s += time.perf_counter() - started

    def columns(self, samples_per_s: float, steps: int, seconds: float) -> dict[str, float]:
        """A row's ``perf/*`` and ``mem/*`` for an interval of ``steps`` steps in ``seconds``
        at ``samples_per_s`` (the row's ``time/samples_per_s``)."""
        self._analyse()  # a row right after the recorded dispatch
        if self._failure is not None:
            error, self._failure = self._failure, None
            warnings.warn(
                f"Trainer perf_metrics: could not analyse the training step's compiled "
                f"programs ({type(error).__name__}: {error}); perf/flops_per_step, "
                "perf/mfu and mem/program_bytes are left out of this fit's rows.",
                RuntimeWarning,
                stacklevel=2,
            )
        steps_per_s = steps / max(seconds, 1e-9)
        row = {"perf/samples_per_s": samples_per_s, "perf/steps_per_s": steps_per_s}
        if self.tokens is not None:
            row["perf/tokens_per_s"] = samples_per_s * self.tokens
        if self.flops_per_step is not None:
            row["perf/flops_per_step"] = self.flops_per_step
            if self._peak is not None:
                row["perf/mfu"] = self.flops_per_step * steps_per_s / self._peak
        if self.program_bytes is not None:
            row["mem/program_bytes"] = float(self.program_bytes)
        peak = peak_device_bytes()
        if peak is not None:
            row["mem/peak_device_bytes"] = float(peak)
        return row
