"""Fresh processes for the generation benchmarks (``generate.py``, ``seq2seq_generate.py``,
``pipelines_bench.py``), and the statistics their tables share.

The parent imports neither jax nor torch: each measurement is ``python -m MODULE --child WHO
...``, a fresh process on the parent's cores (a child inherits the affinity ``_cores.pin`` set,
which sizes XLA's thread pool), which prints one ``RESULT {json}`` line (``report``) that the
parent reads back (``result``). Models are built by transformers in one such process
(``build``), so that js and transformers load the same folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def report(**fields) -> None:
    """A child's measurements, as the line the parent reads."""
    print("RESULT " + json.dumps(fields), flush=True)


def result(stdout: str) -> dict:
    """The last ``RESULT`` line of a child's output."""
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"the child reported nothing:\n{stdout[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def env() -> dict[str, str]:
    """A child's environment: CPU only, offline, quiet, no compilation cache, one XLA device."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    env["TRANSFORMERS_VERBOSITY"] = "error"  # no progress bars in the captured output
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the cold process compiles everything
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags)
    return env


def run(module: str, argv: list[str], timeout: float, what: str) -> dict:
    """``python -m module *argv`` from the repository root; its ``RESULT``."""
    done = subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode:
        raise RuntimeError(f"{what} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return result(done.stdout)


def shape(args: argparse.Namespace) -> list[str]:
    """The generation shape a child repeats: prompt, new tokens, repeats, batch sizes, beams."""
    argv = ["--prompt", str(args.prompt), "--new", str(args.new), "--repeats", str(args.repeats)]
    return [*argv, "--batch", *map(str, args.batch), "--beams", str(args.beams)]


def child(module: str, who: str, folder: Path, args: argparse.Namespace, *extra: str) -> dict:
    """One measuring process: ``--child who`` on ``folder`` with ``args``' generation shape."""
    argv = ["--child", who, "--folder", str(folder), *shape(args), *extra]
    return run(module, argv, args.timeout, f"{who} child")


def build(module: str, folder: Path, kinds: list[str], smoke: bool, timeout: float) -> dict:
    """Write each config's folder ``folder/kind`` with transformers (random weights, seed 0),
    in one process (``--child build``); ``{kind: {"params": ...}}``."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = ["--child", "build", "--folder", str(folder), "--config", *kinds]
    return run(module, [*argv, *(["--smoke"] if smoke else [])], timeout, f"build {kinds}")


def alternate(round_: int, measure: Callable[[str], dict]) -> dict:
    """``{who: measure(who)}`` for js and transformers, in alternating order by round."""
    order = ("js", "transformers") if round_ % 2 == 0 else ("transformers", "js")
    return {who: measure(who) for who in order}


def median_time(call: Callable[[], object], repeats: int) -> tuple[float, list[float]]:
    """The median seconds of ``repeats`` calls, and every call's seconds."""
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        call()
        times.append(time.perf_counter() - begin)
    return statistics.median(times), times


def prompts(batch: int, prompt: int, vocab_size: int):
    """Random token ids ``[batch, prompt]`` (seed 0), int64."""
    import numpy as np

    return np.random.default_rng(0).integers(0, vocab_size, (batch, prompt)).astype(np.int64)


def med(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """The fraction of rows whose new tokens are equal."""
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def rows(rounds: list[dict], who: str, batch: int) -> list[dict]:
    """``who``'s row of one batch size in every round."""
    return [next(r for r in runs[who]["rows"] if r["batch"] == batch) for runs in rounds]


def paired(rounds: list[dict], batch: int, tokens: int) -> dict:
    """js against transformers at one batch size, medians over the rounds: tokens/s (``tokens``
    new tokens per call), the ratio (the median of each round's), time to first token, and
    whether the new tokens are equal (the fraction of equal rows)."""
    js, hf = rows(rounds, "js", batch), rows(rounds, "transformers", batch)
    pairs = list(zip(js, hf, strict=True))
    return {
        "js_tokens_per_s": med(tokens / r["generate_s"] for r in js),
        "hf_tokens_per_s": med(tokens / r["generate_s"] for r in hf),
        "ratio": med(b["generate_s"] / a["generate_s"] for a, b in pairs),
        "js_ttft_s": med(r["ttft_s"] for r in js),
        "hf_ttft_s": med(r["ttft_s"] for r in hf),
        "tokens_equal": all(a["tokens"] == b["tokens"] for a, b in pairs),
        "token_agreement": med(agreement(a["tokens"], b["tokens"]) for a, b in pairs),
    }


def count_problems(report: dict, new: int) -> list[str]:
    """The runs (config, round, process, batch) that did not produce ``new`` tokens per row."""
    problems = []
    for kind, rounds in report["runs"].items():
        for i, runs in enumerate(rounds):
            for who, measured in runs.items():
                for row in measured["rows"]:
                    if row["new_tokens"] != new:
                        problems.append(
                            f"{kind} round {i + 1} {who} batch {row['batch']}: "
                            f"{row['new_tokens']} new tokens, expected {new}"
                        )
    return problems


def arguments(
    parser: argparse.ArgumentParser, configs: Iterable[str], default: list[str], *, batches=True
) -> None:
    """The options every generation benchmark takes (its ``--config`` choices and default);
    ``batches``: also ``--batch`` (batch sizes) and ``--beams``."""
    parser.add_argument("--config", nargs="+", choices=tuple(configs), default=default)
    if batches:
        parser.add_argument("--batch", type=int, nargs="+", help="batch sizes (1 8)")
        parser.add_argument("--beams", type=int, default=1, help="num_beams (1: greedy)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--cores", type=int, help="pin to the first N cores (children inherit)")
    parser.add_argument("--json", type=Path, help="also write every measurement to this file")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per process")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
