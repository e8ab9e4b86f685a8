"""Measuring: variants of one workload, interleaved rounds, paired ratios, compile time, memory.

A *variant* is one way of running a workload's training step (``js``, ``jax``, ``nnx``,
``torch``). Every variant of a workload is built first, then timed in interleaved rounds: in
each round every variant runs the same number of steps back to back (the order rotates between
rounds), so a burst of load from another process hits all variants alike, and the ratio of two
variants *within one round* cancels most of it. A ratio is the median of those paired ratios.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax

REFERENCE = "jax"  # the hand-written step every ratio is taken against


@dataclass
class Variant:
    """One way of running a workload.

    ``step()`` runs one training step (or, for an epoch workload, one epoch) and returns
    something to wait on (an array, a torch tensor, or None). ``memory()`` returns the bytes of
    the step's compiled program (see :func:`program_bytes`), or None where not measurable.
    ``steps_per_call`` divides the time of one call (K steps per dispatch, an epoch's steps).
    ``flops()`` counts the floating-point operations of one step (see :func:`program_flops`);
    the reference variant's count is the workload's, shown against every variant's time.
    """

    step: Callable[[], Any]
    memory: Callable[[], int | None] = lambda: None
    flops: Callable[[], float | None] = lambda: None
    steps_per_call: int = 1
    first_loss: float | None = None


@dataclass
class Result:
    workload: str
    variant: str
    step_s: float  # median seconds per training step
    ratio: float | None  # median of paired ratios to the reference variant
    compile_s: float | None  # first call minus a steady call
    memory_bytes: int | None
    note: str = ""
    rounds: list[float] = field(default_factory=list)
    flops: float | None = None  # floating-point operations of one step (the workload's)


def wait(output) -> None:
    """Block until ``output`` is computed (JAX dispatch is asynchronous; torch eager is not)."""
    if output is None:
        return
    if hasattr(output, "block_until_ready") or isinstance(output, (tuple, list, dict)):
        jax.block_until_ready(output)


def program_bytes(compiled) -> int | None:
    """Peak bytes of a compiled XLA program: arguments + outputs - aliased (donated) + temps.

    This is what the program needs while it runs; outputs that alias a donated argument are
    counted once. ``None`` where the backend has no memory analysis.
    """
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    return (
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        - stats.alias_size_in_bytes
        + stats.temp_size_in_bytes
    )


def program_flops(compiled) -> float | None:
    """XLA's count of the floating-point operations of one run of a compiled program.

    ``cost_analysis()`` counts a loop body once, not once per iteration: a workload with a
    ``lax.scan`` (the LSTM) supplies its own count.
    """
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    return None if not cost else cost.get("flops")


def js_program(fn, *args, **kwargs):
    """The compiled XLA program behind a ``js.jit`` function for these arguments (its
    ``lower``: the program a call runs), so the compiled memory analysis can be read."""
    return fn.lower(*args, **kwargs).compile()


# Calls per timing: up to ``target_s`` of steps, so that a 40 us step is timed over ~0.1 s too.
MAX_CALLS = 5000


def _timed(variant: Variant, calls: int) -> float:
    start = time.perf_counter()
    out = None
    for _ in range(calls):
        out = variant.step()
    wait(out)
    return (time.perf_counter() - start) / (calls * variant.steps_per_call)


def measure(
    workload: str,
    variants: dict[str, Variant],
    *,
    rounds: int,
    target_s: float,
    notes: dict[str, str] | None = None,
    memory: bool = True,
) -> list[Result]:
    """Time every variant in ``rounds`` interleaved rounds; return one Result per variant."""
    names = list(variants)
    compile_s, calls = {}, {}
    for name in names:  # first call: tracing + compilation + one run
        variant = variants[name]
        start = time.perf_counter()
        out = variant.step()
        wait(out)
        first = time.perf_counter() - start
        if out is not None and variant.first_loss is None:
            try:
                variant.first_loss = float(out)
            except (TypeError, ValueError):
                pass
        steady = _timed(variant, 1) * variant.steps_per_call
        compile_s[name] = max(first - steady, 0.0)
        calls[name] = max(1, min(MAX_CALLS, int(target_s / max(steady, 1e-6))))
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            # One untimed call first: the switch from the previous variant (torch's OpenMP
            # threads still spinning, cold caches) is not charged to this one. With the
            # rotation, a variant follows the same neighbour in most rounds, so that cost
            # was a bias (js after torch: +8 % at batch-1 inference), not noise.
            wait(variants[name].step())
            per_round[name].append(_timed(variants[name], calls[name]))
    results = []
    ref = per_round.get(REFERENCE)
    flops = variants[REFERENCE].flops() if REFERENCE in variants and memory else None
    for name in names:
        times = per_round[name]
        ratio = None
        if ref is not None:
            ratio = statistics.median(t / t_ref for t, t_ref in zip(times, ref, strict=True))
        is_jax = not name.startswith("torch")
        results.append(
            Result(
                workload,
                name,
                statistics.median(times),
                ratio,
                compile_s[name] if is_jax else None,
                variants[name].memory() if memory else None,
                (notes or {}).get(name, ""),
                times,
                flops,
            )
        )
    return results
