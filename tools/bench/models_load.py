"""Loading a 124M GPT-2 folder: ``js.models.from_pretrained`` against transformers', and a
sharded load by two processes against a load by one.

Usage, from the repository root, with the bench environment's Python (js-models and
transformers installed: ``hatch run bench:python -m tools.bench.models_load ...``)::

    python -m tools.bench.models_load                         # 124M GPT-2, 3 rounds, both parts
    python -m tools.bench.models_load --part load             # part 1 only (or --part sharded)
    python -m tools.bench.models_load --cores 2 --rounds 5 --folder /tmp/gpt2-124m
    python -m tools.bench.models_load --smoke --rounds 1      # a 2-layer width-64 GPT-2

The folder is written once by transformers (``GPT2LMHeadModel(GPT2Config())``, the 124M
defaults, random init, ``save_pretrained``: config.json + model.safetensors) into a temporary
directory, or into ``--folder DIR`` (kept, and reused when it already holds a config.json).
Every measurement is a fresh Python process; the parent imports neither jax nor torch.

Part 1, ``load``: per round (the order alternating between rounds) one process runs
``js.models.from_pretrained(folder)`` and waits until every array is ready, one runs
``transformers.GPT2LMHeadModel.from_pretrained(folder)``. Each reports its imports (for js
including the start of XLA's CPU backend, which jax defers to first use), the load's seconds,
its RSS just before the load and its peak RSS (``ru_maxrss``) after it; then it reads every
weight once (a sum over each array's host memory, no copy) and reports the seconds and the
peak RSS again. The second peak is the one to compare: a loader may return weights that are
still pages of the memory-mapped safetensors file, not yet read in (transformers 5 does), and
RSS counts such pages only once they are read. Both run on the same cores: ``--cores N`` pins this
process (children inherit the affinity, which sizes XLA's thread pool) and torch is given one
thread per core (``_cores.match_torch``).

Part 2, ``sharded``: the same folder loaded with ``mesh=`` and ``rules=`` (every matrix split
over a 4-device mesh, by rows where 4 divides them: ``RULES``) by two processes on loopback
that form one JAX job (2 CPU devices each, gloo collectives), against one process with 4 CPU
devices loading with the same rules, and one loading without a mesh. Each process reports its
RSS before the load and its peaks after it and after reading its shards, and checks that it
holds only its own shards (each addressable shard of the sharding's shard shape; the fraction
of the model's bytes held by this process's devices).

Every process also reports its RSS at the end split into anonymous memory (its arrays) and
mapped file pages (the safetensors file, while the loader keeps it mapped).

Prints a markdown table per part (medians over the rounds; the js/transformers ratios are the
medians of each round's ratio); ``--json PATH`` also writes every measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.bench import _cores

ROOT = Path(__file__).resolve().parents[2]
# GPT-2's own vocabulary: the embedding's 50257 rows, which no mesh of 4 divides, are there too
SMOKE_CONFIG = {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128}
# Split every matrix over the mesh, by rows where 4 divides them: a row block of a row-major
# tensor is one contiguous range of the file, so a process that reads only its rows maps in
# only those pages (a column block touches every page of the tensor). GPT-2's Conv1D weights
# [in, out] and wpe [1024, 768] go by rows; the token embedding (wte, or lm_head, the name the
# tied pair is listed under) has 50257 rows, which 4 does not divide: by columns. Biases and
# layer norms are replicated. The first matching rule wins.
RULES = (
    ("*.bias", ()),
    ("*ln_*", ()),
    ("*.c_*.weight", ("model", None)),
    ("*.wpe.weight", ("model", None)),
    ("*.weight", (None, "model")),
)
MESH_DEVICES = 4
PROCESSES = 2


# ------------------------------------------------------------------------------- children


def _rss_mib() -> float:
    """This process's resident set now (VmRSS), MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _rss_now() -> dict[str, float]:
    """This process's resident set now, MiB: anonymous memory and mapped file pages apart."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status if line.startswith("Rss"))
    return {
        f"rss_{name.removeprefix('Rss').lower()}_after_mib": int(value.split()[0]) / 1024
        for name, value in fields.items()
    }


def _peak_mib() -> float:
    """This process's peak resident set so far (``ru_maxrss``, KiB on Linux), MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _report(**fields) -> None:
    print("RESULT " + json.dumps(fields), flush=True)


def _child_build(folder: Path, smoke: bool) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**(SMOKE_CONFIG if smoke else {})))
    model.save_pretrained(folder)
    _report(params=sum(p.numel() for p in model.parameters()))


def _child_transformers(folder: Path) -> None:
    start = time.perf_counter()
    threads = _cores.match_torch()
    from transformers import GPT2LMHeadModel

    imported, rss, peak_before = time.perf_counter(), _rss_mib(), _peak_mib()
    model = GPT2LMHeadModel.from_pretrained(folder)
    loaded, peak = time.perf_counter(), _peak_mib()
    params = list(model.parameters())
    _touch([p.detach().numpy() for p in params])
    _report(
        imports_s=imported - start,
        load_s=loaded - imported,
        touch_s=time.perf_counter() - loaded,
        rss_before_mib=rss,
        peak_before_mib=peak_before,
        peak_mib=peak,
        touched_peak_mib=_peak_mib(),
        **_rss_now(),
        params=sum(p.numel() for p in params),
        dtype=str(params[0].dtype).removeprefix("torch."),
        torch_threads=threads,
        cores=len(_cores.available()),
    )


def _touch(host_arrays: list) -> None:
    """Read every byte once (a loader may leave weights as file pages not yet read in)."""
    for array in host_arrays:
        array.sum()


def _arrays(variables) -> list:
    """The arrays of ``variables``, each once (a tied parameter has two names)."""
    seen, arrays = set(), []
    for variable in variables:
        if id(variable) not in seen:
            seen.add(id(variable))
            arrays.append(variable.value)
    return arrays


def _holdings(arrays: list) -> dict:
    """What this process holds: the fraction of the model's bytes on its devices (each distinct
    shard once), the arrays split over the mesh, and any addressable shard whose shape is not
    the sharding's shard shape."""
    total = held = split = 0
    wrong = []
    for array in arrays:
        total += array.nbytes
        if not array.sharding.is_fully_replicated:
            split += 1
        expected = array.sharding.shard_shape(array.shape)
        indices = set()
        for shard in array.addressable_shards:
            if shard.data.shape != expected:
                wrong.append(f"{array.shape}: shard {shard.data.shape}, expected {expected}")
            key = tuple((s.start, s.stop) for s in shard.index)
            if key not in indices:
                indices.add(key)
                held += shard.data.nbytes
    return {"held_fraction": held / total, "split_arrays": split, "wrong_shards": wrong[:5]}


def _child_js(folder: Path, sharded: bool, port: int | None, process_id: int) -> None:
    start = time.perf_counter()
    import jax

    init_s = 0.0
    if port is not None:  # one process of a job on loopback (parent's XLA_FLAGS: its devices)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        begin = time.perf_counter()
        jax.distributed.initialize(
            f"127.0.0.1:{port}",
            num_processes=PROCESSES,
            process_id=process_id,
            initialization_timeout=120,
            shutdown_timeout_seconds=10,
        )
        init_s = time.perf_counter() - begin
    import numpy as np
    from jax.sharding import AxisType, PartitionSpec

    import js.models

    jax.devices()  # XLA's backend starts here, not inside the timed load
    imports_s = time.perf_counter() - start - init_s
    options = {}
    if sharded:
        mesh = jax.make_mesh((MESH_DEVICES,), ("model",), axis_types=(AxisType.Auto,))
        rules = [(pattern, PartitionSpec(*spec)) for pattern, spec in RULES]
        options = {"mesh": mesh, "rules": rules}
    rss, peak_before = _rss_mib(), _peak_mib()
    begin = time.perf_counter()
    model = js.models.from_pretrained(folder, **options)
    arrays = _arrays([*model.parameters(), *model.buffers()])
    jax.block_until_ready(arrays)
    loaded, peak = time.perf_counter(), _peak_mib()
    # each distinct shard on this process's devices, as host memory (a view on CPU, no copy)
    shards = {
        (id(a), tuple((s.start, s.stop) for s in d.index)): d
        for a in arrays
        for d in a.addressable_shards
    }
    _touch([np.asarray(d.data) for d in shards.values()])
    _report(
        imports_s=imports_s,
        init_s=init_s,
        load_s=loaded - begin,
        touch_s=time.perf_counter() - loaded,
        rss_before_mib=rss,
        peak_before_mib=peak_before,
        peak_mib=peak,
        touched_peak_mib=_peak_mib(),
        **_rss_now(),
        params=sum(p.size for p in _arrays(model.parameters())),
        dtype=str(arrays[0].dtype),
        process=jax.process_index(),
        processes=jax.process_count(),
        local_devices=jax.local_device_count(),
        cores=len(_cores.available()),
        **_holdings(arrays),
    )


# --------------------------------------------------------------------------------- parent


def _result(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"the child reported nothing:\n{stdout[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def _env(devices: int | None) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    env["TRANSFORMERS_VERBOSITY"] = "error"  # no progress bars in the captured output
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    if devices is not None:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    env["XLA_FLAGS"] = " ".join(flags)
    return env


def _command(kind: str, folder: Path, *extra: str) -> list[str]:
    module = "tools.bench.models_load"
    return [sys.executable, "-m", module, "--child", kind, "--folder", str(folder), *extra]


def _child(kind: str, folder: Path, timeout: float, *extra: str, devices=None) -> dict:
    done = subprocess.run(
        _command(kind, folder, *extra),
        cwd=ROOT,
        env=_env(devices),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode:
        raise RuntimeError(f"{kind} child failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return _result(done.stdout)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _job(folder: Path, timeout: float) -> list[dict]:
    """Two processes on loopback, one JAX job over ``MESH_DEVICES`` devices, loading sharded."""
    port, devices = _free_port(), MESH_DEVICES // PROCESSES
    children = [
        subprocess.Popen(
            _command("js-sharded", folder, "--port", str(port), "--process-id", str(rank)),
            cwd=ROOT,
            env=_env(devices),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(PROCESSES)
    ]
    try:
        outputs = [child.communicate(timeout=timeout) for child in children]
    finally:
        for child in children:  # one failed or timed out: the other must not linger
            if child.poll() is None:
                child.kill()
                child.communicate()
    for rank, (child, (out, err)) in enumerate(zip(children, outputs, strict=True)):
        if child.returncode:
            raise RuntimeError(f"sharded process {rank} failed:\n{out[-2000:]}\n{err[-3000:]}")
    return sorted((_result(out) for out, _ in outputs), key=lambda r: r["process"])


def build(folder: Path, smoke: bool, timeout: float) -> None:
    """Write the GPT-2 folder with transformers unless ``folder`` already holds one."""
    if (folder / "config.json").is_file():
        return
    folder.mkdir(parents=True, exist_ok=True)
    _child("build", folder, timeout, *(["--smoke"] if smoke else []))


def measure_load(folder: Path, rounds: int, timeout: float) -> dict[str, list[dict]]:
    """Part 1: ``rounds`` fresh-process loads by js and by transformers, alternating."""
    runs: dict[str, list[dict]] = {"js": [], "transformers": []}
    for round_ in range(rounds):
        for kind in ("js", "transformers") if round_ % 2 == 0 else ("transformers", "js"):
            runs[kind].append(_child(kind, folder, timeout))
            print(f"load round {round_ + 1}/{rounds}: {kind} done", file=sys.stderr, flush=True)
    return runs


def measure_sharded(folder: Path, rounds: int, timeout: float) -> dict[str, list[list[dict]]]:
    """Part 2: per round, the 2-process sharded job, 1 process with the same mesh and rules, and
    1 process without a mesh (all with the same devices in total)."""
    runs: dict[str, list[list[dict]]] = {
        f"{PROCESSES} processes, mesh {MESH_DEVICES}, rules": [],
        f"1 process, mesh {MESH_DEVICES}, rules": [],
        "1 process, no mesh": [],
    }
    two, one, plain = runs
    for round_ in range(rounds):
        runs[two].append(_job(folder, timeout))
        runs[one].append([_child("js-sharded", folder, timeout, devices=MESH_DEVICES)])
        runs[plain].append([_child("js", folder, timeout, devices=MESH_DEVICES)])
        print(f"sharded round {round_ + 1}/{rounds} done", file=sys.stderr, flush=True)
    return runs


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def _own(row: dict) -> float:
    """The model's own peak: peak RSS once every weight was read, above the RSS before the load."""
    return row["touched_peak_mib"] - row["rss_before_mib"]


def load_table(runs: dict[str, list[dict]]) -> str:
    """Part 1's medians, and the median per-round js/transformers ratios."""
    for rows in runs.values():
        for row in rows:
            row["own_mib"] = _own(row)
            row["load_read_s"] = row["load_s"] + row["touch_s"]
    columns = (
        ("imports_s", "imports s", "{:.2f}"),
        ("load_s", "load s", "{:.2f}"),
        ("touch_s", "read every weight s", "{:.2f}"),
        ("load_read_s", "load + read s", "{:.2f}"),
        ("rss_before_mib", "RSS before load MiB", "{:.0f}"),
        ("peak_mib", "peak RSS after load MiB", "{:.0f}"),
        ("touched_peak_mib", "peak RSS after reading MiB", "{:.0f}"),
        ("own_mib", "peak after reading - RSS before MiB", "{:.0f}"),
        ("rss_anon_after_mib", "RSS at the end: anon MiB", "{:.0f}"),
        ("rss_file_after_mib", "file MiB", "{:.0f}"),
    )
    js, hf = runs["js"], runs["transformers"]
    params = js[0]["params"]
    lines = [
        f"GPT-2 {params / 1e6:.1f}M parameters ({js[0]['dtype']}; transformers "
        f"{hf[0]['params'] / 1e6:.1f}M, {hf[0]['dtype']}), {len(js)} rounds, "
        f"{js[0]['cores']} cores, torch threads {hf[0]['torch_threads']}",
        "",
        "| from_pretrained | " + " | ".join(title for _, title, _ in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for name, rows in runs.items():
        cells = " | ".join(fmt.format(_median(rows, key)) for key, _, fmt in columns)
        lines.append(f"| {name} | {cells} |")
    ratios = [
        statistics.median(a[key] / b[key] for a, b in zip(js, hf, strict=True))
        for key, _, _ in columns
    ]
    lines.append("| js / transformers | " + " | ".join(f"{r:.2f}x" for r in ratios) + " |")
    return "\n".join(lines)


def sharded_table(runs: dict[str, list[list[dict]]]) -> str:
    """Part 2's medians per run and process; each process's share of the model."""
    lines = [
        "| load | process | devices here | init s | load s | RSS before MiB | peak RSS after "
        "load MiB | peak RSS after reading MiB | peak after reading - RSS before MiB | "
        "RSS at the end: anon MiB | file MiB | arrays split | model bytes held here |",
        "|---" * 13 + "|",
    ]
    own: dict[str, float] = {}
    for name, job_runs in runs.items():
        for rank in range(len(job_runs[0])):
            rows = [job[rank] for job in job_runs]
            own_mib = statistics.median(_own(row) for row in rows)
            own[name] = max(own.get(name, 0.0), own_mib)
            lines.append(
                f"| {name} | {rank} | {rows[0]['local_devices']} | {_median(rows, 'init_s'):.2f} "
                f"| {_median(rows, 'load_s'):.2f} | {_median(rows, 'rss_before_mib'):.0f} | "
                f"{_median(rows, 'peak_mib'):.0f} | {_median(rows, 'touched_peak_mib'):.0f} | "
                f"{own_mib:.0f} | {_median(rows, 'rss_anon_after_mib'):.0f} | "
                f"{_median(rows, 'rss_file_after_mib'):.0f} | {rows[0]['split_arrays']} | "
                f"{100 * rows[0]['held_fraction']:.0f}% |"
            )
    two, one, plain = own
    lines += [
        "",
        f"Per-process peak (after reading every weight, above the RSS before the load; the "
        f"larger process): {two} "
        f"{own[two]:.0f} MiB = {own[two] / own[one]:.2f}x of {one} ({own[one]:.0f} MiB), "
        f"{own[two] / own[plain]:.2f}x of {plain} ({own[plain]:.0f} MiB).",
    ]
    return "\n".join(lines)


def check_shards(runs: dict[str, list[list[dict]]]) -> list[str]:
    """Problems with what the sharded processes hold (empty when each holds only its shards)."""
    problems = []
    two = next(iter(runs))
    for job in runs[two]:
        for row in job:
            where = f"{two}, process {row['process']}"
            if row["processes"] != PROCESSES:
                problems.append(f"{where}: a job of {row['processes']} processes")
            if row["wrong_shards"]:
                problems.append(f"{where}: shards of unexpected shapes {row['wrong_shards']}")
            if not row["split_arrays"] or row["held_fraction"] > 0.75:
                problems.append(
                    f"{where}: holds {100 * row['held_fraction']:.0f}% of the model "
                    f"({row['split_arrays']} arrays split)"
                )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="the GPT-2 folder (written when absent)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--part", choices=("load", "sharded", "both"), default="both")
    parser.add_argument("--smoke", action="store_true", help="a 2-layer width-64 GPT-2")
    parser.add_argument("--cores", type=int, help="pin to the first N cores (children inherit)")
    parser.add_argument("--json", type=Path, help="also write every measurement to this file")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per process (600)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "build":
        _child_build(args.folder, args.smoke)
    elif args.child == "transformers":
        _child_transformers(args.folder)
    elif args.child in ("js", "js-sharded"):
        _child_js(args.folder, args.child == "js-sharded", args.port, args.process_id)
    elif args.child is None:
        return _parent(args)
    else:
        parser.error(f"unknown --child {args.child!r}")
    return 0


def _parent(args: argparse.Namespace) -> int:
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: give at least 1")
    cores = _cores.pin(["--cores", str(args.cores)] if args.cores else [])
    with tempfile.TemporaryDirectory(prefix="js-models-load-") as scratch:
        folder = args.folder or Path(scratch) / "gpt2"
        build(folder, args.smoke, args.timeout)
        report: dict = {"folder": str(folder), "cores": cores, "smoke": args.smoke}
        if args.part in ("load", "both"):
            report["load"] = measure_load(folder, args.rounds, args.timeout)
            print(load_table(report["load"]) + "\n", flush=True)
        if args.part in ("sharded", "both"):
            report["sharded"] = measure_sharded(folder, args.rounds, args.timeout)
            print(sharded_table(report["sharded"]) + "\n", flush=True)
            report["shard_problems"] = check_shards(report["sharded"])
            for problem in report["shard_problems"]:
                print(f"NOT SHARDED AS ASKED: {problem}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if report.get("shard_problems") else 0


if __name__ == "__main__":
    raise SystemExit(main())
