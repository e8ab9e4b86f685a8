"""``python -m tools.bench [--smoke] [--out DIR] [--cores N]``: run every workload, write the table.

``--only NAME`` (repeatable) runs the workloads whose name contains any of the NAMEs.

Writes ``DIR/benchmarks-table.md``, ``DIR/benchmarks.png`` and ``DIR/benchmarks.json``
(default ``docs/``; ``--smoke`` defaults to a temporary directory so that it never overwrites
the published run). XLA and torch get the same cores: all this process may use, or the first N
with ``--cores N`` (pinned in ``__main__`` before jax and torch start); torch runs one thread
per core, its own default. The cores and torch's thread count are recorded with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import jax

from . import _common as C
from . import _cores, _peak, _report
from ._harness import Result, measure

# Full sizes (the issue's) and smoke sizes (a few steps, tiny shapes).
SIZES = {
    "full": dict(
        mlp_batch=128,
        mlp=(784, 512, 512, 10),
        cnn=(64, 28, 32, 64),
        lstm=(32, 100, 128),
        lstm_T=(10, 100, 1000),
        tr=(16, 128, 256),
        ks=(8, 32),
        digits=dict(batch=64),
        inference=dict(cnn=(32, 64), tr=(128, 256)),
        resnet=dict(batch=32, size=32, width=64),
        gpt=dict(layers=4, heads=4, dim=128, context=128, batch=16),
        rounds=11,
        target_s=0.1,
        peak=2048,
    ),
    "smoke": dict(
        mlp_batch=8,
        mlp=(16, 8, 8, 4),
        cnn=(4, 8, 2, 4),
        lstm=(2, 5, 8),
        ks=(4,),
        lstm_T=(3,),
        tr=(2, 8, 16),
        digits=dict(batch=16, c1=2, c2=4, limit=48, ks=(2,)),
        inference=dict(cnn=(2, 4), tr=(8, 16)),
        resnet=dict(batch=2, size=8, width=2),
        gpt=dict(layers=1, heads=2, dim=8, context=8, batch=2),
        rounds=1,
        target_s=0.0,
        peak=64,
    ),
}
# Workloads whose js and hand-written first losses must agree (no dropout: same computation).
DETERMINISTIC = {
    "tiny MLP",
    "MLP 784-512-512-10",
    "LSTM",
    "transformer block",
    "GPT 4x128",
    "ResNet-18 32x32",
}


def workloads(size: dict):
    from . import _cnn, _digits, _gpt, _inference, _lstm, _mlp, _precision, _resnet, _transformer

    yield "tiny MLP", lambda: _mlp.variants((10, 16, 16, 4), 8)
    yield "tiny MLP, K steps/dispatch", lambda: _mlp.scan_variants((10, 16, 16, 4), 8, size["ks"])
    yield "MLP 784-512-512-10", lambda: _mlp.variants(size["mlp"], size["mlp_batch"])
    yield "CNN 28x28", lambda: _cnn.variants(*size["cnn"])
    yield "LSTM", lambda: _lstm.variants(*size["lstm"])
    yield "transformer block", lambda: _transformer.variants(*size["tr"])
    yield "transformer block, bf16-mixed", lambda: _precision.variants(*size["tr"])
    yield "digits epoch", lambda: _digits.variants(**size["digits"])
    yield from _inference.workloads(size["inference"])
    yield "ResNet-18 32x32", lambda: _resnet.variants(**size["resnet"])
    yield "GPT 4x128", lambda: _gpt.variants(**size["gpt"])


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = _cores.available()
    info = {
        "cpu": cpu,
        "cores": len(cores),
        "core_ids": ",".join(map(str, cores)),
        "machine_cores": os.cpu_count(),
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
        "python": platform.python_version(),
    }
    import flax
    import optax

    info.update(flax=flax.__version__, optax=optax.__version__)
    if C.HAVE_TORCH:
        import torch

        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads())
    if hasattr(os, "getloadavg"):
        info["load_1min"] = round(os.getloadavg()[0], 2)
    return info


def check_losses(results: list[Result], first: dict, selected=lambda name: True) -> list[str]:
    """Where js and hand-written JAX do the same computation, their first losses agree (of the
    workloads ``selected`` ran)."""
    problems = []
    for workload in filter(selected, DETERMINISTIC):
        a, b = first.get((workload, "js")), first.get((workload, "jax"))
        if a is None or b is None or abs(a - b) > 1e-4 * max(1.0, abs(b)):
            problems.append(f"{workload}: js first loss {a} != hand-written {b}")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, one round")
    parser.add_argument("--out", type=Path, default=None, help="output directory (docs/)")
    parser.add_argument(
        "--only",
        action="append",
        default=None,
        help="run workloads whose name contains this (repeat it for several)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument(
        "--cores",
        type=int,
        default=None,
        help="run XLA and torch on the first N cores (default: all available)",
    )
    args = parser.parse_args(argv)
    size = SIZES["smoke" if args.smoke else "full"]
    out = args.out or (Path(tempfile.mkdtemp(prefix="bench-")) if args.smoke else Path("docs"))
    out.mkdir(parents=True, exist_ok=True)
    if args.cores is not None:  # already pinned by __main__; again for a direct main() call
        _cores.pin(["--cores", str(args.cores)])
    _cores.match_torch()
    rounds = args.rounds or size["rounds"]
    only = [pattern.lower() for pattern in args.only or []]

    def selected(name: str) -> bool:
        return not only or any(pattern in name.lower() for pattern in only)

    started = time.perf_counter()
    results, first = [], {}
    for name, build in workloads(size):
        if not selected(name):
            continue
        print(f"-- {name}", file=sys.stderr, flush=True)
        variants = build()
        # The smoke run reads the memory analysis of the first workload only (it recompiles).
        memory = not args.smoke or not results
        got = measure(name, variants, rounds=rounds, target_s=size["target_s"], memory=memory)
        results.extend(got)
        first.update({(name, v): variants[v].first_loss for v in variants})
    from . import _checkpoint, _lstm  # checkpoints: save/load time and peak RSS, a table of its own

    lstm_compile = []
    if selected("lstm"):
        lstm_compile = _lstm.compile_times(size["lstm"][0], size["lstm"][2], size["lstm_T"])
    checkpoints = (
        []
        if not selected("checkpoint")
        else _checkpoint.run(_checkpoint.SIZES["smoke" if args.smoke else "full"])
    )
    info = machine()
    info.update({f"peak_{k}": v for k, v in _peak.peak(size["peak"]).items() if k != "n"})
    info["wall_s"] = round(time.perf_counter() - started, 1)
    table = _report.table(results, lstm_compile, info)
    if checkpoints:
        table += "\n\n" + _checkpoint.table(checkpoints) + "\n"
    print(table)
    (out / "benchmarks-table.md").write_text(table)
    (out / "benchmarks.json").write_text(
        json.dumps(
            {
                "machine": info,
                "results": [r.__dict__ for r in results],
                "lstm_compile": lstm_compile,
                "checkpoints": checkpoints,
                "first_losses": {f"{w}|{v}": x for (w, v), x in first.items()},
            },
            indent=1,
        )
    )
    _report.chart(results, out / "benchmarks.png", info)
    problems = check_losses(results, first, selected)
    for problem in problems:
        print("MISMATCH", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
