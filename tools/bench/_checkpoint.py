"""Checkpoint workloads: save and load time and peak extra host memory (RSS) of
``save_checkpoint``/``load_checkpoint`` at both ends of the scale: 10,000 small arrays
(5,000 ``Linear(2, 2)``) and one ~50M-parameter model (6 blocks of ``Linear(1024, 4096)`` and
``Linear(4096, 1024)``, 200 MB of float32).

Peak extra RSS is sampled every millisecond by a thread while the call runs, minus the RSS just
before it, and is reported as a multiple of the model's size. Uses only the public API, so the
same file measures any js release: ``python -m tools.bench._checkpoint [--smoke] [--rounds N]``
with that release's ``packages/*/src`` on PYTHONPATH. ``python -m tools.bench.checkpoint_compare``
runs it before and after, side by side (see there).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import js
import js.nn as nn
from js.training import load_checkpoint, save_checkpoint

SIZES = {
    "full": dict(small_layers=5000, blocks=6, width=1024, rounds=3),
    "smoke": dict(small_layers=50, blocks=1, width=32, rounds=1),
}
PAGE = os.sysconf("SC_PAGE_SIZE")


class ManySmall(js.Module):
    def __init__(self, n: int):
        super().__init__()
        self.layers = [nn.Linear(2, 2, rngs=js.Rngs(params=i)) for i in range(n)]


class Wide(js.Module):
    def __init__(self, blocks: int, width: int):
        super().__init__()
        rngs = js.Rngs(params=0)
        self.blocks = [
            nn.Sequential(
                nn.Linear(width, 4 * width, rngs=rngs), nn.Linear(4 * width, width, rngs=rngs)
            )
            for _ in range(blocks)
        ]


def _rss() -> int:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * PAGE


def peak_extra(call) -> tuple[float, int]:
    """``(seconds, peak RSS above the RSS before)`` of ``call()``."""
    gc.collect()
    base, peak, done = _rss(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.001)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    started = time.perf_counter()
    try:
        call()
    finally:
        seconds = time.perf_counter() - started
        done.set()
        thread.join()
    return seconds, max(peak[0], _rss()) - base


def nbytes(model: js.Module) -> int:
    return sum(int(np.prod(p.value.shape)) * p.value.dtype.itemsize for p in model.parameters())


def measure(name: str, build, rounds: int) -> dict:
    """Median save and load seconds over ``rounds`` fresh directories, and the largest peak."""
    model, target = build(), build()
    saves, loads, save_peak, load_peak = [], [], 0, 0
    for _ in range(rounds):
        path = Path(tempfile.mkdtemp(prefix="bench-ckpt-")) / "ck"
        try:
            seconds, peak = peak_extra(lambda p=path: save_checkpoint(p, {"model": model}))
            saves.append(seconds)
            save_peak = max(save_peak, peak)
            seconds, peak = peak_extra(lambda p=path: load_checkpoint(p, {"model": target}))
            loads.append(seconds)
            load_peak = max(load_peak, peak)
        finally:
            shutil.rmtree(path.parent, ignore_errors=True)
    size = nbytes(model)
    return {
        "workload": name,
        "arrays": len(model.state_dict()),
        "model_bytes": size,
        "save_s": float(np.median(saves)),
        "load_s": float(np.median(loads)),
        "save_peak_extra_x": save_peak / size,
        "load_peak_extra_x": load_peak / size,
    }


def run(size: dict) -> list[dict]:
    n, blocks, width = size["small_layers"], size["blocks"], size["width"]
    count = blocks * (8 * width * width + 5 * width)  # weights and biases
    return [
        measure(f"{2 * n:,} small arrays", lambda: ManySmall(n), size["rounds"]),
        measure(
            f"wide model ({count / 1e6:.1f}M parameters)",
            lambda: Wide(blocks, width),
            size["rounds"],
        ),
    ]


def table(rows: list[dict]) -> str:
    """Peak extra RSS in MB and as a multiple of the model's size (the multiple means little
    for a model of a few hundred KB, where Python's own objects dominate)."""
    lines = [
        "| checkpoint workload | arrays | model MB | save s | load s | save peak extra RSS "
        "| load peak extra RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mb = r["model_bytes"] / 2**20
        save, load = r["save_peak_extra_x"], r["load_peak_extra_x"]
        lines.append(
            f"| {r['workload']} | {r['arrays']} | {mb:.1f} | {r['save_s']:.3f} | "
            f"{r['load_s']:.3f} | {save * mb:.0f} MB ({save:.2f}x) | "
            f"{load * mb:.0f} MB ({load:.2f}x) |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny models, one round")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (fresh directories)")
    args = parser.parse_args(argv)
    size = dict(SIZES["smoke" if args.smoke else "full"])
    if args.rounds is not None:
        size["rounds"] = args.rounds
    rows = run(size)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
