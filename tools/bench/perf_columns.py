"""What the Trainer's perf columns cost, and the MFU the digits CNN reaches.

Usage, from the repository root, with the train environment's Python (js-train, sklearn)::

    python -m tools.bench.perf_columns                    # both sections, 5 rounds
    python -m tools.bench.perf_columns --cores 2 --json perf_columns.json
    python -m tools.bench.perf_columns --smoke            # tiny shapes, one round

Sections, each in this one process (``--cores N`` pins it to N cores first):

- ``overhead``: the same small fit (an MLP on generated data, batch 32, a log every 10 steps)
  with ``Trainer(perf_metrics=True)`` and with ``perf_metrics=False``, alternating within each
  of ``--rounds`` rounds, each a fresh model and Trainer. Steps per second come from the rows'
  ``time/epoch_s`` of every epoch after the first (the first compiles, and pays the perf
  analysis: the step's programs lowered again from JAX's caches, reported apart as
  ``analysis_s``). The ratio on / off of the medians is the per-step cost of the columns;
  ``transfers`` (device reads) must be equal.
- ``mfu``: the digits CNN of ``docs/examples/digits.py`` (``_digits.DigitsCNN``, Adam, batch
  64) trained for ``--epochs`` epochs with ``peak_flops='measure'``: the last epoch's
  ``perf/flops_per_step``, ``perf/steps_per_s`` and ``perf/mfu`` against
  ``js.training.measure_peak_flops()`` (a float32 2048x2048 matmul's rate on the CPU).

Read the ratio, not the absolute numbers: both variants run in the same process and round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from . import _cores


def _perf_columns(trainer) -> object:
    """The PerfColumns callback the Trainer installed (its ``analysis_s``; a dummy when off)."""
    from js.training._perf import PerfColumns

    found = [c for c in trainer.callbacks if isinstance(c, PerfColumns)]
    return found[0] if found else argparse.Namespace(analysis_s=0.0)


def _mlp_fit(perf: bool, epochs: int, n: int, width: int) -> dict:
    import numpy as np

    import js
    import js.nn as nn
    import js.optim
    from js.training import ArrayLoader, Task, Trainer

    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 32)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    rngs = js.Rngs(params=0)
    model = nn.Sequential(
        nn.Linear(32, width, rngs=rngs), nn.ReLU(), nn.Linear(width, 2, rngs=rngs)
    )
    task = Task(model, js.optim.Adam(model.parameters(), lr=1e-3))
    trainer = Trainer(
        epochs, verbose=False, progress=False, log_every_n_steps=10, perf_metrics=perf
    )
    history = trainer.fit(task, ArrayLoader(x, y, batch_size=32, shuffle=True, seed=0))
    steps = n // 32 if n % 32 == 0 else n // 32 + 1
    epoch_rows = [row for row in history if "time/epoch_s" in row]
    return {
        "steps_per_s": [steps / row["time/epoch_s"] for row in epoch_rows[1:]],
        "first_epoch_s": epoch_rows[0]["time/epoch_s"],
        "analysis_s": _perf_columns(trainer).analysis_s,
        "transfers": trainer.transfers,
        "columns": sorted(k for k in history[-1] if k.startswith(("perf/", "mem/"))),
    }


def overhead(rounds: int, epochs: int, n: int, width: int) -> dict:
    """Steps/s of the same fit with the perf columns on and off, side by side."""
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    for r in range(rounds):
        for name in ("on", "off") if r % 2 == 0 else ("off", "on"):
            runs[name].append(_mlp_fit(name == "on", epochs, n, width))
    out = {}
    for name, results in runs.items():
        rates = [rate for result in results for rate in result["steps_per_s"]]
        out[name] = {
            "steps_per_s": statistics.median(rates),
            "first_epoch_s": statistics.median(r["first_epoch_s"] for r in results),
            "analysis_s": statistics.median(r["analysis_s"] for r in results),
            "transfers": results[0]["transfers"],
            "columns": results[0]["columns"],
        }
    out["ratio"] = out["on"]["steps_per_s"] / out["off"]["steps_per_s"]
    return out


def mfu(epochs: int, limit: int | None, n: int | None) -> dict:
    """The digits CNN's MFU against the measured matmul peak."""
    import js
    import js.optim
    from js.training import ArrayLoader, Task, Trainer, measure_peak_flops

    from . import _digits

    x, y = _digits.data(limit)
    model = _digits.DigitsCNN(32, 64, rngs=js.Rngs(params=0))
    task = Task(model, js.optim.Adam(model.parameters(), lr=2e-3), rngs=js.Rngs(dropout=1))
    peak = measure_peak_flops(n)  # the number the Trainer's 'measure' reads (cached)
    trainer = Trainer(epochs, verbose=False, progress=False, peak_flops=peak)
    history = trainer.fit(task, ArrayLoader(x, y, batch_size=64, shuffle=True, seed=0))
    last = history[-1]
    return {
        "peak_flops": peak,
        "flops_per_step": last["perf/flops_per_step"],
        "steps_per_s": last["perf/steps_per_s"],
        "samples_per_s": last["perf/samples_per_s"],
        "mfu": last["perf/mfu"],
        "program_bytes": last["mem/program_bytes"],
        "analysis_s": _perf_columns(trainer).analysis_s,
    }


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    cores = _cores.pin(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--sections", default="overhead,mfu")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    smoke = args.smoke
    if smoke:
        args.rounds, args.epochs = 1, 2
    results: dict = {"cores": len(cores)}
    sections = args.sections.split(",")
    if "overhead" in sections:
        n, width = (128, 16) if smoke else (4096, 64)
        results["overhead"] = overhead(args.rounds, args.epochs, n, width)
    if "mfu" in sections:
        results["mfu"] = mfu(args.epochs, 128 if smoke else None, 256 if smoke else None)
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return results


if __name__ == "__main__":
    main()
