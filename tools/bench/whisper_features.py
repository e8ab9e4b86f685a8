"""Whisper's log-mel features: ``js.models.WhisperFeatureExtractor`` (NumPy) against
transformers' ``WhisperFeatureExtractor`` on the same audio (issue 35).

Usage, from the repository root, with the models environment's Python (js-models, torch and
transformers installed: ``hatch run models:python -m tools.bench.whisper_features``)::

    python -m tools.bench.whisper_features                  # 30 s of audio, batch 1 and 8
    python -m tools.bench.whisper_features --cores 2 --json whisper_features.json
    python -m tools.bench.whisper_features --smoke          # 2 s, batch 1, one round, one call

The audio: ``--seconds`` of 16 kHz float32 per row (a tone and noise, seeded), padded to
Whisper's 30 s window by both extractors (80 mel bins, ``[B, 80, 3000]`` out). transformers
computes the STFT with torch when torch is installed (as here) and with NumPy otherwise; the
report names which. Each workload (one batch size) is timed ``--repeats`` times per round
(median), rounds alternating which library goes first; items: seconds of audio per second.
``--cores N`` pins the process to N cores and gives torch one thread per core. The features
are checked equal (1e-4 of their scale) before anything is timed. Prints a markdown table
(medians over rounds; the ratio is the median of each round's ratio); ``--json PATH`` also
writes every measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tools.bench import _cores

RATE = 16000


def audio(rows: int, seconds: float, seed: int = 0) -> list[np.ndarray]:
    """``rows`` clips of ``seconds``: a 440 Hz tone (a different phase per row) and noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    return [
        (0.5 * np.sin(2 * np.pi * 440 * t + row) + 0.1 * rng.standard_normal(t.size)).astype(
            np.float32
        )
        for row in range(rows)
    ]


def _median_seconds(call: Callable[[list[np.ndarray]], object], clips: list, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call(clips)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(args: argparse.Namespace) -> dict:
    """Every round's js and transformers seconds per batch size, and the features' check."""
    import transformers
    from transformers.utils import is_torch_available

    from js.models import WhisperFeatureExtractor

    ours, theirs = WhisperFeatureExtractor(), transformers.WhisperFeatureExtractor()
    sides = {
        "js": lambda clips: ours(clips, sampling_rate=RATE)["input_features"],
        "transformers": lambda clips: theirs(clips, sampling_rate=RATE, return_tensors="np")[
            "input_features"
        ],
    }
    rows, problems = [], []
    for batch in args.batch:
        clips = audio(batch, args.seconds)
        got, expected = sides["js"](clips), sides["transformers"](clips)
        error = float(np.abs(got - expected).max() / np.abs(expected).max())
        if error > 1e-4:
            problems.append(f"batch {batch}: features differ by {error:.2e} of their scale")
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
            seconds = {name: _median_seconds(sides[name], clips, args.repeats) for name in order}
            rows.append({"batch": batch, "round": round_, "error": error, **seconds})
    backend = "torch" if is_torch_available() else "numpy"
    return {"rows": rows, "problems": problems, "transformers_stft": backend}


def summary(report: dict, seconds: float) -> list[dict]:
    """Per batch size: audio seconds per second of each side (median over rounds) and the
    median of each round's js / transformers ratio."""
    out = []
    for batch in sorted({row["batch"] for row in report["rows"]}):
        rows = [row for row in report["rows"] if row["batch"] == batch]
        out.append(
            {
                "batch": batch,
                "js_audio_s_per_s": batch * seconds / statistics.median(r["js"] for r in rows),
                "transformers_audio_s_per_s": batch
                * seconds
                / statistics.median(r["transformers"] for r in rows),
                "ratio": statistics.median(r["transformers"] / r["js"] for r in rows),
                "error": rows[0]["error"],
            }
        )
    return out


def table(report: dict) -> str:
    lines = [
        f"Whisper features, {report['seconds']} s of audio per row, {len(report['cores'])} cores "
        f"(transformers' STFT: {report['transformers_stft']})",
        "",
        "| batch | js (audio s/s) | transformers (audio s/s) | js / transformers | max rel. diff |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in report["summary"]:
        lines.append(
            f"| {row['batch']} | {row['js_audio_s_per_s']:.1f} | "
            f"{row['transformers_audio_s_per_s']:.1f} | {row['ratio']:.2f} | {row['error']:.1e} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="audio per row (30)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8], help="rows (1 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per round (5)")
    parser.add_argument("--smoke", action="store_true", help="2 s, batch 1, 1 round, 1 call")
    parser.add_argument("--cores", type=int, help="pin to the first N cores")
    parser.add_argument("--json", type=Path, help="also write every measurement to this file")
    args = parser.parse_args(argv)
    if args.smoke:
        args.seconds, args.batch, args.rounds, args.repeats = 2.0, [1], 1, 1
    if args.rounds < 1 or args.repeats < 1 or not 0 < args.seconds <= 30:
        raise SystemExit("give --rounds and --repeats >= 1 and 0 < --seconds <= 30")
    cores = _cores.pin(["--cores", str(args.cores)] if args.cores else [])
    _cores.match_torch()
    report = {"cores": cores, "seconds": args.seconds, "smoke": args.smoke, **measure(args)}
    report["summary"] = summary(report, args.seconds)
    print(table(report) + "\n", flush=True)
    for problem in report["problems"]:
        print(f"NOT COMPARABLE: {problem}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
