"""Where a training step's time goes: the js step's XLA kernels against torch's operators.

``python -m tools.bench._profile [WORKLOAD ...]`` (default: the workloads where torch is ahead)
profiles ``STEPS`` steady steps of the ``js`` and ``torch`` variants of each workload and sums
the time of each kernel by kind:

- **matmul / conv**: XLA's XNNPACK fusions (``ynn_fusion``: dots and convolutions with what is
  fused into them) and its Eigen ``dot``/``convolution`` thunks; torch's ``mm``/``addmm``/
  ``bmm``/convolution operators and its fused attention and LSTM operators;
- **layout copies**: XLA's ``copy``/``transpose`` fusions; torch's ``copy_``/``clone``/
  ``contiguous``;
- **other**: elementwise loops and reductions (norms, softmax, GELU, the optimizer update).

js's figures are the XLA thunks' wall times from ``jax.profiler``, innermost ones only (a
loop's thunk encloses its body's kernels; independent thunks can run at once on two cores,
so the sum may exceed the step); torch's are the operators' own
(``self``) CPU times from ``torch.profiler``, which include their intra-op threads' work. Read
the shares and the per-kind totals side by side; the step times are in the bench table.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import re
import sys
import tempfile

import jax

from ._harness import wait

STEPS = 5
GAPS = ("CNN 28x28", "LSTM", "transformer block", "ResNet-18 32x32", "GPT 4x128")
_KINDS = ("matmul / conv", "layout copies", "other")


def _xla_kind(name: str) -> str | None:
    if name.startswith(
        ("ThunkExecutor", "$", "Slinky", "PjitFunction", "Execute", "end: ", "Threadpool")
    ):
        return None  # the executor, Python frames, the thread pool, end markers: not kernels
    if name.startswith(("ynn_fusion", "dot", "convolution", "custom-call")):
        return _KINDS[0]
    if re.match(r"(copy|transpose|bitcast_copy)", name):
        return _KINDS[1]
    return _KINDS[2]


def _torch_kind(name: str) -> str | None:
    op = name.removeprefix("aten::")
    if not name.startswith("aten::") or op in ("empty", "empty_strided", "resize_", "view"):
        return None
    if re.search(r"mm|conv|linear|matmul|attention|dot|lstm|rnn|gru", op):  # fused kernels too
        return _KINDS[0]
    if op in ("copy_", "clone", "contiguous", "_to_copy"):
        return _KINDS[1]
    return _KINDS[2]


def profile_js(step) -> dict[str, float]:
    """Milliseconds per step of each kind of XLA kernel while ``step`` runs."""
    for _ in range(2):
        wait(step())
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder, create_perfetto_trace=True)
        for _ in range(STEPS):
            out = step()
        wait(out)
        jax.profiler.stop_trace()
        [path] = glob.glob(f"{folder}/**/*.trace.json.gz", recursive=True)
        with gzip.open(path) as file:
            trace = json.load(file)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    kernels = [e for e in events if e.get("ph") == "X" and _xla_kind(e.get("name", ""))]
    totals: dict[str, float] = collections.defaultdict(float)
    for event in _innermost(kernels):
        totals[_xla_kind(event["name"])] += event.get("dur", 0) / 1000 / STEPS
    return totals


def _innermost(events: list[dict]) -> list[dict]:
    """The events that enclose no other one on their thread: a loop's thunk (``while``)
    encloses its body's kernels, which are counted instead."""
    by_thread = collections.defaultdict(list)
    for event in events:
        by_thread[(event.get("pid"), event.get("tid"))].append(event)
    leaves = []
    for group in by_thread.values():
        group.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        for this, after in zip(group, group[1:] + [None], strict=True):
            if after is None or after["ts"] >= this["ts"] + this.get("dur", 0):
                leaves.append(this)
    return leaves


def profile_torch(step) -> dict[str, float]:
    """Milliseconds per step of each kind of torch operator (self CPU time)."""
    import torch

    for _ in range(2):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            step()
    totals: dict[str, float] = collections.defaultdict(float)
    for event in prof.key_averages():
        kind = _torch_kind(event.key)
        if kind is not None:
            totals[kind] += event.self_cpu_time_total / 1000 / STEPS
    return totals


def _row(workload: str, variant: str, totals: dict[str, float]) -> str:
    whole = sum(totals.values()) or 1.0
    cells = [f"{totals.get(k, 0.0):.1f} ({100 * totals.get(k, 0.0) / whole:.0f} %)" for k in _KINDS]
    return f"| {workload} | {variant} | " + " | ".join(cells) + f" | {whole:.1f} |"


def main(names) -> None:
    from . import _common as C
    from .run import SIZES, workloads

    print("| workload | variant | " + " | ".join(f"{k}, ms" for k in _KINDS) + " | sum, ms |")
    print("|---|---|" + "---:|" * (len(_KINDS) + 1))
    for name, build in workloads(SIZES["full"]):
        if name not in names:
            continue
        variants = build()
        print(_row(name, "js", profile_js(variants["js"].step)), flush=True)
        if C.HAVE_TORCH and "torch" in variants:
            print(_row(name, "torch", profile_torch(variants["torch"].step)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or GAPS)
