"""Data wait: the share of training time the Trainer's loop waits for its input, with and
without grain workers and device prefetch, for a transform about as long as a step.

Usage, from the repository root, with a Python that has js-train and grain (the ``train``
environment: ``$(hatch env find train)/bin/python``)::

    python -m tools.bench.data_wait                     # 2 workers, 40 measured steps
    python -m tools.bench.data_wait --workers 4 --steps 100 --json data_wait.json
    python -m tools.bench.data_wait --smoke             # tiny, no worker processes

The workload is an MLP (``--width``, batch ``--batch``) trained by ``Trainer.fit`` on a grain
pipeline ``MapDataset.source(rows).batch(B).map(decode)`` whose ``decode`` sleeps so that a
batch takes about one step's time (measured first, on batches made in advance: the
``step_s`` column), as a costly decode or read would. Variants:

- ``inline``: the pipeline read in the loop (no grain threads or workers), ``prefetch=0``;
- ``prefetch``: the same, with ``Trainer(prefetch=2)`` (the next batch is made while a step
  runs);
- ``workers``: ``.mp_prefetch(num_workers=W)``, ``prefetch=0``;
- ``workers+prefetch``: both (the Trainer's default ``prefetch=2``).

For each, the fraction is ``time/data_wait_s`` (the seconds the loop waited for its next batch)
over the wall-clock time of the same log intervals, after a first interval that holds the
compilation and the workers' start. The loop dispatches steps without waiting for them, so
the device computes the dispatched steps while the loop waits: the wait is host time, and
``inline`` is high even where the device was busy; ``time s`` (the same steps' wall-clock
time) is the throughput. Read the fractions against ``inline``: input made ahead (workers,
prefetch) brings them toward 0 as far as the cores allow (on a machine with few cores the
workers compete with the step for them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import _cores


class _Rows:
    """A grain source of ``(x, y)`` rows with a fixed repr."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index]

    def __repr__(self):
        return f"_Rows({len(self.x)})"


class _Decode:
    """A per-batch transform that sleeps ``seconds`` (a costly decode: one sleep, as sleeps of
    microseconds per row would take far longer than asked); picklable for workers."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __call__(self, row):
        time.sleep(self.seconds)
        return row


def _task(width: int, features: int, classes: int):
    """An MLP classifier (the Task's default classification steps, Adam)."""
    import js
    import js.nn as nn
    import js.optim
    from js.training import Task

    class MLP(js.Module):
        def __init__(self, *, rngs):
            super().__init__()
            self.fc1 = nn.Linear(features, width, rngs=rngs)
            self.fc2 = nn.Linear(width, width, rngs=rngs)
            self.fc3 = nn.Linear(width, classes, rngs=rngs)

        def forward(self, x):
            relu = nn.functional.relu
            return self.fc3(relu(self.fc2(relu(self.fc1(x)))))

    model = MLP(rngs=js.Rngs(params=0))
    return Task(model, js.optim.Adam(model.parameters(), lr=1e-3))


def _clock():
    """A callback recording the wall-clock time at each step's end (in ``.at``)."""
    from js.training import Callback

    class Clock(Callback):
        def __init__(self):
            self.at: dict[int, float] = {}

        def on_step_end(self, trainer, task, step):
            self.at[step] = time.perf_counter()

    return Clock()


def _fit(data, *, prefetch: int, steps: int, warm: int, width: int, shape) -> dict:
    """One fit of ``warm + steps`` steps, logging every ``warm``: the steps, the wait and the
    wall-clock time of the log intervals after the first."""
    from js.training import Trainer

    clock = _clock()
    trainer = Trainer(
        max_steps=warm + steps + 1,  # the last row is the epoch's: the logs before it are read
        log_every_n_steps=warm,
        prefetch=prefetch,
        callbacks=[clock],
        verbose=False,
        progress=False,
    )
    history = trainer.fit(_task(width, *shape), data)
    logged = [row for row in history if "time/epoch_s" not in row and row["step"] > warm]
    wait = sum(row["time/data_wait_s"] for row in logged)
    last = int(logged[-1]["step"]) if logged else warm
    interval = clock.at[last] - clock.at[warm]
    return {"steps": last - warm, "data_wait_s": wait, "interval_s": interval}


def measure(
    *, workers: int, steps: int, warm: int, batch: int, width: int, features: int = 64
) -> dict:
    """The step time, then every variant's wait fraction."""
    import grain
    import numpy as np

    classes = 10
    rng = np.random.default_rng(0)
    rows = (warm + steps + 2) * batch
    x = rng.normal(size=(rows, features)).astype(np.float32)
    y = rng.integers(0, classes, rows).astype(np.int32)
    shape = (features, classes)

    # the step alone: batches made in advance, read in the loop
    ready = [(x[i : i + batch], y[i : i + batch]) for i in range(0, rows - batch + 1, batch)]
    alone = _fit(ready, prefetch=0, steps=steps, warm=warm, width=width, shape=shape)
    step_s = alone["interval_s"] / max(alone["steps"], 1)

    source = grain.MapDataset.source(_Rows(x, y)).batch(batch).map(_Decode(step_s))
    inline = source.to_iter_dataset(grain.ReadOptions(num_threads=0))
    variants = {"inline": (inline, 0), "prefetch": (inline, 2)}
    if workers > 0:
        parallel = source.to_iter_dataset(grain.ReadOptions(num_threads=0)).mp_prefetch(
            grain.MultiprocessingOptions(num_workers=workers)
        )
        variants["workers"] = (parallel, 0)
        variants["workers+prefetch"] = (parallel, 2)
    results = {"step_s": step_s, "batch_transform_s": step_s, "workers": workers, "variants": {}}
    for name, (data, prefetch) in variants.items():
        run = _fit(data, prefetch=prefetch, steps=steps, warm=warm, width=width, shape=shape)
        run["fraction"] = run["data_wait_s"] / max(run["interval_s"], 1e-9)
        results["variants"][name] = run
    return results


def table(results: dict) -> str:
    lines = [
        f"step {results['step_s'] * 1e3:.2f} ms; each batch's transform about as long; "
        f"{results['workers']} workers",
        f"{'variant':<18}{'steps':>6}{'wait s':>9}{'time s':>9}{'wait fraction':>15}",
    ]
    for name, run in results["variants"].items():
        lines.append(
            f"{name:<18}{run['steps']:>6}{run['data_wait_s']:>9.3f}{run['interval_s']:>9.3f}"
            f"{run['fraction']:>15.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    cores = _cores.pin(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.workers, args.steps, args.warm, args.batch, args.width = 0, 6, 3, 8, 32
    args.steps = -(-args.steps // args.warm) * args.warm  # whole log intervals
    results = measure(
        workers=args.workers, steps=args.steps, warm=args.warm, batch=args.batch, width=args.width
    )
    results["cores"] = len(cores)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
