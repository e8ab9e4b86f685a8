"""Stop and restart times of a long run: a SIGTERM to a training process until its step is
saved and it has exited, and a 2-process job restarted by ``js.training.launch --max-restarts``.

Usage, from the repository root, with a Python that has js-train and scikit-learn (the
``bench`` environment: ``$(hatch env find bench)/bin/python``)::

    python -m tools.bench.stop_time --cores 2              # 5 stops of each model, 1 restart
    python -m tools.bench.stop_time --rounds 3 --json stop_time.json
    python -m tools.bench.stop_time --smoke                # one stop of the digits CNN

``stop``: a child (``_stop_child.py single``) trains the digits CNN or a 50.4M-parameter MLP,
both with Adam, through ``Trainer.fit`` with a ``ModelCheckpoint(every_n_steps=...)`` that
saves only the step a stop asks for. Once it has run 20 steps the parent sends SIGTERM and
times, from the signal, ``saved`` (the fit's end has waited for the checkpoint's write) and
``exit`` (the process has ended, with code 143). Each stop's checkpoint is then loaded into
a fresh model (digests checked) to show it is complete.

``restart``: a 2-process job of the digits CNN (``Trainer(mesh=...)``, a checkpoint every 10
steps) whose process 1 dies at step 25. Timed from that death: the launcher's report, the
restarted job's start (its imports and joining the job done), and its first finished step
(it resumed from step 20, or from 10 when step 20's background write was not complete when
the process died). ``cold`` is the
first start's time from the launcher's start to its first finished step, for scale: a restart
is a cold start plus the stop of the surviving process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import _cores, _stop_child

CHILD = str(Path(__file__).with_name("_stop_child.py"))
CRASH = 25  # the job's process 1 dies at this step; the last checkpoint before it is 20


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", JS_COMPILATION_CACHE="0")


def _line(process: subprocess.Popen, word: str, timeout: float = 600.0) -> str:
    """The child's next stdout line that starts with ``word`` (earlier lines skipped)."""
    assert process.stdout is not None
    deadline = time.time() + timeout
    for line in process.stdout:
        if line.startswith(word):
            return line
        if time.time() > deadline:
            break
    process.kill()
    error = process.stderr.read()[-3000:] if process.stderr else ""
    raise RuntimeError(f"the child ended or timed out before printing {word!r}:\n{error}")


def stop(model: str) -> dict:
    """One SIGTERM to a child training ``model``: seconds to the saved step and to its exit."""
    from js.training import load_checkpoint

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ckpt"
        with subprocess.Popen(
            [sys.executable, CHILD, "single", model, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        ) as child:
            _line(child, "ready")
            sent = time.time()
            child.send_signal(signal.SIGTERM)
            saved = float(_line(child, "saved").split()[1])
            code = child.wait(timeout=600)
            ended = time.time()
            stderr = child.stderr.read() if child.stderr else ""
        if code != 128 + signal.SIGTERM:
            raise RuntimeError(f"the child exited with {code}, not 143:\n{stderr[-3000:]}")
        fresh = _stop_child.build(model)[0]  # the same model class, for the load check
        restored = load_checkpoint(path, {"model": fresh}, which="last")
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return {
        "saved_s": saved - sent,
        "exit_s": ended - sent,
        "step": restored["step"],
        "checkpoint_bytes": size,
        "parameters": sum(int(p.size) for p in fresh.parameters()),
    }


def restart() -> dict:
    """One crash of a 2-process job restarted by the launcher: the times, from the crash."""
    with tempfile.TemporaryDirectory() as folder:
        launched = time.time()
        run = [sys.executable, "-m", "js.training.launch", "--processes", "2"]
        stamps: dict[str, float] = {}
        with subprocess.Popen(
            [*run, "--max-restarts", "1", CHILD, "job", str(Path(folder) / "ckpt"), str(CRASH)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
        ) as job:
            assert job.stdout is not None
            for line in job.stdout:
                now = time.time()
                text = line.split("] ", 1)[-1].strip()
                word, *rest = text.split() or [""]
                if line.startswith("[launch]") and "restart 1 of 1" in line:
                    stamps["reported"] = now
                elif word in ("first", "start") and rest:
                    stamps[f"{word}{rest[0]}"] = float(rest[1])
                elif word == "crash":
                    stamps["crash"] = float(rest[0])
                elif word == "resumed":
                    stamps["resumed_step"] = int(rest[1])
            code = job.wait(timeout=600)
    if code != 0 or "first1" not in stamps:
        raise RuntimeError(f"the job exited with {code}; saw {sorted(stamps)}")
    crash = stamps["crash"]
    return {
        "cold_s": stamps["first0"] - launched,
        "reported_s": stamps["reported"] - crash,
        "started_s": stamps["start1"] - crash,
        "first_step_s": stamps["first1"] - crash,
        "resumed_from": stamps["resumed_step"],
    }


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(rounds: int, models: list[str], restarts: int) -> dict:
    results: dict = {"rounds": rounds, "stop": {}, "restart": []}
    for model in models:
        runs = [stop(model) for _ in range(rounds)]
        results["stop"][model] = {
            "parameters": runs[0]["parameters"],
            "checkpoint_bytes": runs[0]["checkpoint_bytes"],
            "saved_s": _summary([run["saved_s"] for run in runs]),
            "exit_s": _summary([run["exit_s"] for run in runs]),
            "runs": runs,
        }
    results["restart"] = [restart() for _ in range(restarts)]
    return results


def table(results: dict) -> str:
    lines = [
        f"SIGTERM to a training process: seconds from the signal ({results['rounds']} stops, "
        "median [min-max])",
        f"{'model':<10}{'parameters':>12}{'checkpoint MB':>15}{'step saved':>20}{'exit':>20}",
    ]
    for model, row in results["stop"].items():
        cells = [
            f"{row[key]['median']:.2f} [{row[key]['min']:.2f}-{row[key]['max']:.2f}]"
            for key in ("saved_s", "exit_s")
        ]
        lines.append(
            f"{model:<10}{row['parameters']:>12,}{row['checkpoint_bytes'] / 1e6:>15.1f}"
            f"{cells[0]:>20}{cells[1]:>20}"
        )
    for run in results["restart"]:
        lines.append(
            f"2-process restart (digits CNN), seconds from process 1's death: reported "
            f"{run['reported_s']:.2f}, restarted job started {run['started_s']:.2f}, first step "
            f"(resumed from {run['resumed_from']}) {run['first_step_s']:.2f}; a cold start to "
            f"its first step {run['cold_s']:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    cores = _cores.pin(argv)  # the children inherit the affinity
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--restarts", type=int, default=1)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    models = ["digits", "mlp50m"]
    if args.smoke:
        args.rounds, args.restarts, models = 1, 0, ["digits"]
    results = measure(args.rounds, models, args.restarts)
    results["cores"] = len(cores)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
