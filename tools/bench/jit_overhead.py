"""Per-call overhead of ``js.jit`` against hand-written ``jax.jit``, for two js trees side by side.

``python -m tools.bench.jit_overhead --before PATH [--rounds R] [--calls N]`` starts one worker
process per js tree (``PATH``, e.g. ``git worktree add /tmp/before <commit>``, and this
checkout), each importing js from its tree's ``packages/*/src``. Rounds alternate between the
workers (the order swapping every round); in a round a worker times N calls of the tiny-MLP
Adam step (10-16-16-4, batch 8, where per-call overhead is all there is) under ``js.jit`` and
N of the same step hand-written with ``jax.jit`` over donated arrays, back to back, and reports
the ratio js/jax, of wall-clock time and of the calling thread's CPU time (Python and dispatch,
which a loaded machine disturbs less). A ratio within one process and one round cancels most of
the load of a shared machine; the medians over rounds are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ("js-core", "js-nn", "js-losses", "js-optim", "js-train", "js-models", "js")


def _steps():
    """``(js_call, jax_call)``: the bench's tiny-MLP Adam step (``_mlp``), js and hand-written
    JAX, same shapes and initial weights, donated state."""
    from tools.bench import _mlp

    variants = _mlp.variants((10, 16, 16, 4), 8, torch=False)
    return variants["js"].step, variants["jax"].step


def _time(call, n: int) -> tuple[float, float]:
    """Microseconds per call over ``n`` calls, waiting for the last result: wall-clock time, and
    the CPU time of the calling thread (Python, dispatch; steadier on a loaded machine)."""
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(n):
        out = call()
    out.block_until_ready()
    return (time.perf_counter() - start) / n * 1e6, (time.thread_time() - cpu) / n * 1e6


def worker(calls: int) -> None:
    """Serve rounds: read a line, answer ``{"js": [wall, cpu], "jax": [wall, cpu]}`` (us)."""
    import js

    js_call, jax_call = _steps()
    for call in (js_call, jax_call):  # compile and warm up
        _time(call, 200)
    print(json.dumps({"ready": js.__file__}), flush=True)
    swap = False
    for _ in sys.stdin:
        first, second = (jax_call, js_call) if swap else (js_call, jax_call)
        a, b = _time(first, calls), _time(second, calls)
        times = {"jax": a, "js": b} if swap else {"js": a, "jax": b}
        swap = not swap
        print(json.dumps(times), flush=True)


def _start(tree: Path, calls: int) -> subprocess.Popen:
    # js from the tree's sources (ahead of any installed js); the workload from this checkout
    paths = [str(tree / "packages" / d / "src") for d in DISTRIBUTIONS] + [str(ROOT)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.Popen(
        [sys.executable, "-m", "tools.bench.jit_overhead", "--worker", "--calls", str(calls)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _ask(process: subprocess.Popen) -> dict:
    process.stdin.write("round\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def compare(trees: dict[str, Path], rounds: int, calls: int) -> dict[str, dict]:
    """Per tree: median js and jax microseconds per call, and the median and range of js/jax."""
    workers = {name: _start(tree, calls) for name, tree in trees.items()}
    try:
        for name, process in workers.items():
            ready = json.loads(process.stdout.readline())
            print(f"{name}: js from {ready['ready']}", flush=True)
        samples = {name: [] for name in workers}
        order = list(workers)
        for _ in range(rounds):
            for name in order:
                samples[name].append(_ask(workers[name]))
            order.reverse()
    finally:
        for process in workers.values():
            process.stdin.close()  # the worker's loop ends; it exits
            process.wait(timeout=60)
            process.stdout.close()
    out = {}
    for name, rows in samples.items():
        result = {"rounds": len(rows)}
        for clock, i in (("wall", 0), ("cpu", 1)):
            ratios = sorted(r["js"][i] / r["jax"][i] for r in rows)
            result[clock] = {
                "js_us": statistics.median(r["js"][i] for r in rows),
                "jax_us": statistics.median(r["jax"][i] for r in rows),
                "ratio": statistics.median(ratios),
                "ratio_min": ratios[0],
                "ratio_max": ratios[-1],
            }
        out[name] = result
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another js checkout to compare with")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", type=Path, help="also write the medians to this file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.calls)
        return
    trees = {"before": args.before} if args.before else {}
    trees["this tree"] = ROOT
    results = compare(trees, args.rounds, args.calls)
    for name, result in results.items():
        for clock in ("wall", "cpu"):
            r = result[clock]
            print(
                f"{name:>10} {clock:>4}: js {r['js_us']:.1f} us, jax {r['jax_us']:.1f} us per "
                f"call; js/jax median {r['ratio']:.3f} (range {r['ratio_min']:.3f}-"
                f"{r['ratio_max']:.3f}, {result['rounds']} rounds of {args.calls} calls)"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
