"""Checkpoint save and load before and after a change, side by side in one run.

Usage, from the repository root (the shared virtual environment's Python; js need not be
installed, each tree's sources are put on the path)::

    python -m tools.bench.checkpoint_compare                 # before issue 10 against this tree
    python -m tools.bench.checkpoint_compare --ref main --ref 80615ec^1 --rounds 5
    python -m tools.bench.checkpoint_compare --smoke --rounds 1   # tiny models: checks it runs

Each ``--ref`` (a commit, branch or tag; by default ``BEFORE``, main just before issue 10's
checkpoint work was merged) is checked out in a temporary ``git worktree`` and removed at the
end. Each round then runs the workloads of :mod:`tools.bench._checkpoint` (10,000 small
arrays; a ~50M-parameter model) once per tree, each in a fresh Python process with only that
tree's ``packages/*/src`` on PYTHONPATH, the trees alternating within the round so that a
change in the machine's load touches them alike. A fresh process per measurement also keeps
the peak honest: a process's first save pays for buffers that its later saves reuse. The
workload uses only ``save_checkpoint``/``load_checkpoint``, so it runs on any js release.

Prints one table: per workload and tree, the median over the rounds of the save and load
seconds and of the peak extra RSS (a multiple of the model's size).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "80615ec^1"  # main before the merge of issue 10 (format js.training/2)
COLUMNS = ("save_s", "load_s", "save_peak_extra_x", "load_peak_extra_x")


@contextlib.contextmanager
def checked_out(ref: str):
    """A temporary detached worktree of ``ref`` (removed on exit)."""
    where = Path(tempfile.mkdtemp(prefix="ckpt-compare-")) / "tree"
    git = ["git", "-C", str(ROOT)]
    subprocess.run(
        [*git, "worktree", "add", "--detach", str(where), ref],
        check=True,
        capture_output=True,
        text=True,
    )
    try:
        yield where
    finally:
        subprocess.run(
            [*git, "worktree", "remove", "--force", str(where)], check=False, capture_output=True
        )


def measure(tree: Path, smoke: bool, timeout: float) -> list[dict]:
    """One run of the workloads against ``tree``'s sources, in a fresh process."""
    if not (tree / "packages" / "js-core" / "src" / "js").is_dir():
        # Checked here: where js is installed (hatch's bench environment), a tree without its
        # sources would silently measure the installed js instead.
        raise RuntimeError(
            f"{tree} holds no js sources (packages/js-core/src/js): nothing to measure. Fix: "
            "pass --ref a commit of this repository"
        )
    sources = sorted(str(p) for p in (tree / "packages").glob("*/src"))
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "rows.json"
        command = [sys.executable, "-m", "tools.bench._checkpoint", "--rounds", "1"]
        command += ["--json", str(out)] + (["--smoke"] if smoke else [])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sources)}  # that tree's js only
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise RuntimeError(f"the workload failed against {tree}:\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def table(results: dict[str, list[list[dict]]]) -> str:
    """Medians per workload and tree, the trees in the order given."""
    lines = [
        "| checkpoint workload | tree | save s | load s | save peak extra RSS | "
        "load peak extra RSS |",
        "|---|---|---|---|---|---|",
    ]
    workloads = [row["workload"] for row in next(iter(results.values()))[0]]
    for workload in workloads:
        for label, runs in results.items():
            rows = [row for run in runs for row in run if row["workload"] == workload]
            save, load, save_x, load_x = (statistics.median(r[c] for r in rows) for c in COLUMNS)
            mb = rows[0]["model_bytes"] / 2**20
            lines.append(
                f"| {workload} | {label} | {save:.3f} | {load:.3f} | "
                f"{save_x * mb:.0f} MB ({save_x:.2f}x) | "
                f"{load_x * mb:.0f} MB ({load_x:.2f}x) |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", action="append", help=f"a tree to compare (default {BEFORE})")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--smoke", action="store_true", help="tiny models")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per process")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        trees = {}
        for ref in args.ref or [BEFORE]:
            sha = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", ref],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            trees[f"{ref} ({sha})"] = stack.enter_context(checked_out(ref))
        trees["this tree"] = ROOT
        results: dict[str, list] = {label: [] for label in trees}
        for round_ in range(args.rounds):
            for label, tree in trees.items():
                results[label].append(measure(tree, args.smoke, args.timeout))
                print(f"round {round_ + 1}/{args.rounds}: {label} done", file=sys.stderr)
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
