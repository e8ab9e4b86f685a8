"""Every example in docs/examples runs in its fast mode and prints what it promises."""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"


STEP_EXAMPLES = ("lstm_forecast.py", "autoencoder.py", "gan.py", "char_lm.py")
# The examples turn on js's compilation cache: keep it out of the user's ~/.cache.
ENV = {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="js-examples-cache-")}


def start(name, *args):
    if name == "char_lm.py" and not args:  # its TensorBoard run goes to a temporary directory
        args = ("--out", tempfile.mkdtemp(prefix="char_lm-"))
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / name), "--fast", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def finish(process):
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stdout + stderr
    return stdout


def run(name, *args):
    return finish(start(name, *args))


@pytest.fixture(scope="module")
def step_examples():
    """The step examples, started together (compilation dominates; they overlap on 2 cores)."""
    processes = {name: start(name) for name in STEP_EXAMPLES}
    yield processes
    for process in processes.values():
        if process.poll() is None:
            process.kill()
        process.communicate()


def refused(name, *args):
    process = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert process.returncode == 2, process.stdout + process.stderr  # argparse's usage error
    return process.stderr


@pytest.mark.process
@pytest.mark.slow
def test_digits_trains_checkpoints_and_resumes(tmp_path, step_examples):
    out_dir = tmp_path / "run"
    out = run("digits.py", "--out", str(out_dir))  # --fast: 2 epochs
    assert re.search(
        # the printed row is for a person: 4 significant digits, no counts, each unit once
        r"^epoch 0  step 20  train/loss \d\.\d+  train/accuracy \d+(\.\d+)?%  val/loss "
        r".*  time/epoch \S+ m?s  time/samples \S+/s  perf/flops \S+[kMG]/step  "
        r"mem/program \S+ [kMG]B$",
        out,
        re.M,
    )
    assert re.search(r"^epoch 1  ", out, re.M) and not re.search(r"^epoch 2", out, re.M)
    assert re.search(r"^test accuracy 0\.\d{4} \(best checkpoint: epoch [01]\)$", out, re.M)
    assert re.search(
        rf"^best checkpoint: {re.escape(str(out_dir / 'checkpoints'))}/[01]$", out, re.M
    )
    assert re.search(
        r"^device-to-host metric reads \(trainer.transfers\): 4 in 2 epochs; "
        r"each epoch's checkpoint save also copies \d+ arrays \(parameters, buffers, "
        r"optimizer state, Rngs\) to the host$",
        out,
        re.M,
    )
    for name in ("metrics.csv", "curves.png"):
        assert (out_dir / name).exists() and f"{name}" in out
    # the same directory again, without --resume: refused before anything is touched
    assert "already holds a run: pass --resume to continue it, --overwrite" in refused(
        "digits.py", "--fast", "--out", str(out_dir)
    )
    assert "pick one" in refused("digits.py", "--resume", "--overwrite", "--out", str(out_dir))
    again = run("digits.py", "--epochs", "3", "--resume", "--out", str(out_dir))
    assert "resuming after epoch 1 from" in again and re.search(r"^epoch 2  ", again, re.M)
    assert not re.search(r"^epoch [01]  ", again, re.M)
    rows = (out_dir / "metrics.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["20", "40", "60"]  # global steps
    done = run("digits.py", "--epochs", "3", "--resume", "--out", str(out_dir))
    assert re.search(
        r"^nothing left to train: .* already holds epochs 0-2 of 3\. Pass a larger "
        r"--epochs",
        done,
        re.M,
    )
    assert "epoch 3" not in done and "test accuracy" not in done


@pytest.mark.parametrize(
    "name, pattern",
    [
        ("lstm_forecast.py", r"^validation MSE \d+\.\d{4} vs repeat-last-value baseline 0\.\d{4}$"),
        ("autoencoder.py", r"^reconstruction MSE 0\.\d{4} vs mean-image baseline 0\.\d{4}$"),
        ("gan.py", r"^generated points within 0\.5 of the ring: [01]\.\d\d; mean radius"),
        (
            "char_lm.py",
            r"^val loss \d\.\d{4} after 24 steps \(12 updates\) vs unigram baseline "
            r"\d\.\d{4}$",
        ),
    ],
)
@pytest.mark.process
@pytest.mark.slow
def test_step_examples_run_and_report(name, pattern, step_examples):
    out = finish(step_examples[name])
    assert re.search(pattern, out, re.M), out
    if name == "char_lm.py":  # an endless stream: steps, no epoch ends; reads per log
        assert re.search(r"^epoch 0  step 6  train/loss .*  val/loss \d\.\d+", out, re.M), out
        assert re.search(r"^device-to-host reads \(trainer.transfers\): 16$", out, re.M), out
    else:
        assert re.search(r"^epoch 1  ", out, re.M)


@pytest.mark.process
@pytest.mark.slow
def test_forward_demo_prints_the_model_and_its_output_shape():
    process = subprocess.run(
        [sys.executable, str(EXAMPLES / "forward_demo.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert process.returncode == 0, process.stdout + process.stderr
    out = process.stdout
    assert out.startswith("MLP(\n  (hidden): Linear(\n")  # the printed module tree
    assert "(weight): Parameter(shape=[10, 32], dtype=float32)" in out
    assert re.search(
        r"^js \S+: 2410 parameters; input \(8, 64\) -> output \(8, 10\)$", out, re.M
    ), out


@pytest.mark.slow
@pytest.mark.process
def test_trainer_overhead_reports_a_ratio():
    out = run("trainer_overhead.py")
    assert re.search(r"^ratio Trainer / hand-written: \d+\.\d\d$", out, re.M)
