"""Start-up of the digits run, phase by phase: js without a cache, js with a cold and a warm
compilation cache, and PyTorch.

``python -m tools.bench._startup`` runs each in a fresh process (the data is loaded before the
clock starts, the same for all) and prints, in seconds: the framework's imports, building the
model and optimizer, the first finished training step and the first finished validation step.
The js runs are the example's own pieces (``docs/examples/digits.py``'s ``DigitsCNN``,
``steps.dropout_classification_step``, ``steps.classification_eval_step``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_JS = """
import json, sys, time
import numpy as np
from sklearn.datasets import load_digits
d = load_digits()
x = (d.images[:64] / 16.0).astype(np.float32)[:, None]; y = d.target[:64].astype(np.int32)
t = [time.perf_counter()]
import jax, js, js.nn, js.optim
from js.training import steps
if sys.argv[1] != "none":
    js.enable_compilation_cache(sys.argv[1])
sys.path.insert(0, "docs/examples")
from digits import DigitsCNN
t.append(time.perf_counter())
model = DigitsCNN(rngs=js.Rngs(params=0))
opt, rngs = js.optim.Adam(model.parameters(), lr=2e-3), js.Rngs(dropout=1)
jax.block_until_ready([p.value for p in model.parameters()])
t.append(time.perf_counter())
batch = (jax.numpy.asarray(x), jax.numpy.asarray(y))
float(steps.dropout_classification_step(model, opt, batch, rngs)["loss"])
t.append(time.perf_counter())
model.eval()
float(steps.classification_eval_step(model, batch)["correct"])
t.append(time.perf_counter())
print(json.dumps([b - a for a, b in zip(t, t[1:])]))
"""

_TORCH = """
import json, time
import numpy as np
from sklearn.datasets import load_digits
d = load_digits()
x = (d.images[:64] / 16.0).astype(np.float32)[:, None]; y = d.target[:64].astype(np.int64)
t = [time.perf_counter()]
import torch
from torch import nn
t.append(time.perf_counter())
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.3), nn.Linear(1024, 10))
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
t.append(time.perf_counter())
bx, by = torch.from_numpy(x), torch.from_numpy(y)
opt.zero_grad(); loss = nn.functional.cross_entropy(model(bx), by); loss.backward(); opt.step()
float(loss)
t.append(time.perf_counter())
model.eval()
with torch.no_grad():
    float((model(bx).argmax(-1) == by).sum())
t.append(time.perf_counter())
print(json.dumps([b - a for a, b in zip(t, t[1:])]))
"""

PHASES = ("imports", "build", "first step", "first validation")


def _run(code: str, *args: str) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k != "JS_COMPILATION_CACHE"}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure() -> dict[str, list[float]]:
    cache = tempfile.mkdtemp(prefix="js-startup-cache-")
    rows = {
        "js, no cache": _run(_JS, "none"),
        "js, cold cache": _run(_JS, cache),
        "js, warm cache": _run(_JS, cache),
    }
    try:
        import torch  # noqa: F401

        rows["torch"] = _run(_TORCH)
    except ImportError:
        pass
    return rows


def table(rows: dict[str, list[float]]) -> str:
    lines = ["| run | " + " | ".join(PHASES) + " | total |", "|---" * (len(PHASES) + 2) + "|"]
    for name, times in rows.items():
        cells = " | ".join(f"{t:.2f}" for t in times)
        lines.append(f"| {name} | {cells} | {sum(times):.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(measure()))
