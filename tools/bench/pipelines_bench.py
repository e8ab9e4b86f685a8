"""Text-generation pipelines: ``js.models.pipeline("text-generation", folder)`` against
transformers' ``pipeline("text-generation", model=folder)`` on the same folder (issue 36).

Usage, from the repository root, with the bench environment's Python (js-models, tokenizers
and transformers installed: ``hatch run bench:python -m tools.bench.pipelines_bench ...``)::

    python -m tools.bench.pipelines_bench                     # GPT-2-small's shape, 3 rounds
    python -m tools.bench.pipelines_bench --cores 2 --json pipelines.json
    python -m tools.bench.pipelines_bench --config qwen3      # Qwen3-0.6B's shape
    python -m tools.bench.pipelines_bench --smoke --rounds 1  # a tiny model, 8 short requests

The folder, built once (``torch.manual_seed(0)``, ``save_pretrained`` into a temporary folder):
a byte-level BPE tokenizer trained here (``tokenizers_bench.build``: 8000 tokens, ChatML
template, left padding) and beside it a random float32 ``GPT2LMHeadModel`` of GPT-2-small's
shape (``generate.GPT2``: 12 layers, width 768) or, with ``--config qwen3``, a
``Qwen3ForCausalLM`` of Qwen3-0.6B's shape (``generate.QWEN3``), with the tokenizer's vocabulary
(a larger one would generate ids the tokenizer cannot decode) and no end token, so that every
request gets exactly ``--new`` (16) tokens. Both pipelines are called with
``max_new_tokens=--new, do_sample=False, return_full_text=False``.

Workloads, per process:

- *stream*: ``--requests`` (32) prompts of mixed lengths (4 to 120 words of
  ``tokenizers_bench``'s word list, seed 0; the report gives their token counts) in one call
  with ``batch_size=--batch-size`` (8). The first pass is timed alone (js compiles here: the
  report counts the programs it compiled), then ``--repeats`` passes (median): requests/s and
  new tokens/s;
- *latency*: the first prompt alone, one warm-up call then ``--repeats`` calls (median ms).

js's programs: the deltas of ``js.models._generation.TRACES`` (prefill, decode, ...) and
``js.models.pipelines.TRACES`` over the first stream pass, each a program traced and compiled by
``js.jit``; and, for completeness, every XLA compilation in that pass (jax's
``/jax/core/compile/backend_compile_duration`` events: the traced programs plus small eager
operations), with their seconds. The persistent compilation cache is off.

Every measurement is a fresh Python process (js and transformers alternating in order by
round); ``--cores N`` pins this process to N cores (children inherit the affinity, which sizes
XLA's thread pool) and torch gets one intra-op thread per core. The generated texts are checked
equal. Prints a markdown table (medians over the rounds; ratios: the median of each round's
transformers / js time); ``--json PATH`` also writes every measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools.bench import _children, _cores, generate, tokenizers_bench

MODULE = "tools.bench.pipelines_bench"
FULL = {"gpt2": generate.GPT2, "qwen3": generate.QWEN3}
NAMES = {"gpt2": "GPT-2-small", "qwen3": "Qwen3-0.6B"}
VOCAB = {False: 8000, True: 300}  # the tokenizer's (and the model's) vocabulary, by smoke
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def requests(count: int, max_words: int) -> list[str]:
    """``count`` prompts of 4 to ``max_words`` words (seed 0)."""
    return [" ".join(text.split(" ")[:max_words]) for text in tokenizers_bench.texts(count)]


# ------------------------------------------------------------------------------- children


def _child_build(folder: Path, kind: str, smoke: bool) -> None:
    import torch
    import transformers

    tokenizers_bench.build(folder, VOCAB[smoke])
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, padding_side="left")
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    options = {**(generate.SMOKE if smoke else FULL)[kind], **generate.NO_EOS}
    options["vocab_size"] = len(tokenizer)
    config_class, model_class = generate.CLASSES[kind]
    config = getattr(transformers, config_class)(**options)
    model = getattr(transformers, model_class)(config)
    model.save_pretrained(folder)
    _children.report(params=sum(p.numel() for p in model.parameters()), vocab=len(tokenizer))


def _texts(outputs: list) -> list[str]:
    """The generated text of each request (both pipelines: ``[[{"generated_text"}], ...]``)."""
    return [output[0]["generated_text"] for output in outputs]


def _workloads(call: Callable[[object], list], args: argparse.Namespace, counters) -> dict:
    """The stream's passes (``counters()``' deltas over the first) and the latency calls."""
    stream = requests(args.requests, args.max_words)
    before = counters()
    begin = time.perf_counter()
    outputs = call(stream)
    first_s = time.perf_counter() - begin
    counted = {k: v - before.get(k, 0) for k, v in counters().items()}
    stream_s, times = _children.median_time(lambda: call(stream), args.repeats)
    warm = {k: v - before.get(k, 0) - counted[k] for k, v in counters().items()}
    call(stream[0])
    latency_s, latencies = _children.median_time(lambda: call(stream[0]), args.repeats)
    return {"stream_first_s": first_s, "stream_s": stream_s, "stream_times_s": times,
            "latency_s": latency_s, "latency_times_s": latencies, "counted": counted,
            "counted_warm": warm, "texts": _texts(outputs)}  # fmt: skip


def _child_js(folder: Path, args: argparse.Namespace) -> None:
    import jax

    import js
    import js.models
    from js.models import _generation, pipelines

    jax.devices()
    js.disable_compilation_cache()
    compiles: list[float] = []

    def listen(event: str, seconds: float, **_) -> None:
        if event == COMPILE_EVENT:
            compiles.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(listen)
    begin = time.perf_counter()
    pipe = js.models.pipeline("text-generation", folder, batch_size=args.batch_size)
    load_s = time.perf_counter() - begin

    def call(inputs):
        out = pipe(inputs, max_new_tokens=args.new, do_sample=False, return_full_text=False)
        return [out] if isinstance(inputs, str) else out

    def counters() -> dict[str, float]:
        return {"programs": sum(_generation.TRACES.values()) + sum(pipelines.TRACES.values()),
                "compilations": len(compiles), "compile_s": sum(compiles),
                **{f"traced_{k}": v for k, v in _generation.TRACES.items()}}  # fmt: skip

    measured = _workloads(call, args, counters)
    stream = requests(args.requests, args.max_words)
    lengths = [len(pipe.tokenizer(text, return_tensors=None)["input_ids"]) for text in stream]
    _children.report(load_s=load_s, cores=len(_cores.available()), prompt_tokens=lengths,
                     **measured)  # fmt: skip


def _child_transformers(folder: Path, args: argparse.Namespace) -> None:
    threads = _cores.match_torch()
    import torch
    import transformers

    begin = time.perf_counter()
    pipe = transformers.pipeline("text-generation", model=str(folder), dtype=torch.float32)
    load_s = time.perf_counter() - begin

    def call(inputs):
        out = pipe(inputs, batch_size=args.batch_size, max_new_tokens=args.new,
                   do_sample=False, return_full_text=False)  # fmt: skip
        return [out] if isinstance(inputs, str) else out

    measured = _workloads(call, args, dict)
    _children.report(load_s=load_s, cores=len(_cores.available()), torch_threads=threads,
                     **measured)  # fmt: skip


# --------------------------------------------------------------------------------- parent


def _shape(args: argparse.Namespace) -> list[str]:
    return ["--new", str(args.new), "--requests", str(args.requests), "--max-words",
            str(args.max_words), "--batch-size", str(args.batch_size), "--repeats",
            str(args.repeats)]  # fmt: skip


def summarize(report: dict) -> list[dict]:
    """One row per config: medians over the rounds, ratios of paired rounds."""
    out = []
    for kind, rounds in report["runs"].items():
        js = [runs["js"] for runs in rounds]
        hf = [runs["transformers"] for runs in rounds]
        pairs = list(zip(js, hf, strict=True))
        count, new = report["requests"], report["new"]
        lengths = js[0]["prompt_tokens"]
        out.append({
            "config": kind,
            "params": report["built"][kind]["params"],
            "prompt_tokens": [min(lengths), max(lengths), sum(lengths) / len(lengths)],
            "js_latency_s": _children.med(r["latency_s"] for r in js),
            "hf_latency_s": _children.med(r["latency_s"] for r in hf),
            "latency_ratio": _children.med(b["latency_s"] / a["latency_s"] for a, b in pairs),
            "js_requests_per_s": _children.med(count / r["stream_s"] for r in js),
            "hf_requests_per_s": _children.med(count / r["stream_s"] for r in hf),
            "js_tokens_per_s": _children.med(count * new / r["stream_s"] for r in js),
            "hf_tokens_per_s": _children.med(count * new / r["stream_s"] for r in hf),
            "stream_ratio": _children.med(b["stream_s"] / a["stream_s"] for a, b in pairs),
            "js_first_pass_s": _children.med(r["stream_first_s"] for r in js),
            "hf_first_pass_s": _children.med(r["stream_first_s"] for r in hf),
            "programs": js[0]["counted"]["programs"],
            "traced": {k[7:]: v for k, v in js[0]["counted"].items() if k[:7] == "traced_" and v},
            "compilations": js[0]["counted"]["compilations"],
            "compile_s": _children.med(r["counted"]["compile_s"] for r in js),
            "warm_programs": max(r["counted_warm"]["programs"] for r in js),
            "texts_equal": all(a["texts"] == b["texts"] for a, b in pairs),
        })  # fmt: skip
    return out


def table(summary: list[dict], report: dict) -> str:
    lines = [
        f"text-generation pipelines, float32, greedy, {report['new']} new tokens per request; "
        f"latency: one prompt; stream: {report['requests']} requests of mixed lengths, "
        f"batch_size {report['batch_size']}; {report['rounds']} rounds, {report['cores']} cores, "
        f"torch threads {report['torch_threads']}",
        "",
        "| model | prompt tokens min/max/mean | js latency ms | transformers latency ms "
        "| latency speed-up (transformers ms / js ms) | js req/s | transformers req/s | js tok/s "
        "| transformers tok/s | stream speed-up (js req/s / transformers) | js first pass s "
        "| transformers first pass s | js programs compiled (stream) | XLA compilations (s) "
        "| texts equal |",
        "|---" * 15 + "|",
    ]
    for s in summary:
        low, high, mean = s["prompt_tokens"]
        traced = ", ".join(f"{k} {v}" for k, v in s["traced"].items())
        lines.append(
            f"| {NAMES[s['config']]} {s['params'] / 1e6:.1f}M | {low}/{high}/{mean:.0f} "
            f"| {1e3 * s['js_latency_s']:.0f} | {1e3 * s['hf_latency_s']:.0f} "
            f"| {s['latency_ratio']:.2f}x | {s['js_requests_per_s']:.2f} "
            f"| {s['hf_requests_per_s']:.2f} | {s['js_tokens_per_s']:.1f} "
            f"| {s['hf_tokens_per_s']:.1f} | {s['stream_ratio']:.2f}x "
            f"| {s['js_first_pass_s']:.1f} | {s['hf_first_pass_s']:.1f} "
            f"| {s['programs']} ({traced}) | {s['compilations']} ({s['compile_s']:.1f}) "
            f"| {'yes' if s['texts_equal'] else 'no'} |"
        )
    return "\n".join(lines)


def check(report: dict) -> list[str]:
    """Problems: texts that differ, or a warm pass of the stream that compiled."""
    problems = []
    for s in report["summary"]:
        if not s["texts_equal"]:
            problems.append(f"{s['config']}: js's generated texts differ from transformers'")
        if s["warm_programs"]:
            problems.append(f"{s['config']}: a warm stream pass compiled {s['warm_programs']}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _children.arguments(parser, FULL, ["gpt2"], batches=False)
    parser.add_argument("--new", type=int, help="max_new_tokens (16; smoke 4)")
    parser.add_argument("--requests", type=int, help="requests in the stream (32; smoke 8)")
    parser.add_argument("--max-words", type=int, help="a prompt's words at most (120; smoke 12)")
    parser.add_argument("--batch-size", type=int, default=8, help="pipeline batch_size (8)")
    parser.add_argument("--repeats", type=int, help="timed calls per workload (3; smoke 1)")
    parser.add_argument("--smoke", action="store_true", help="a tiny model, 8 short requests")
    args = parser.parse_args(argv)
    args.new = args.new or (4 if args.smoke else 16)
    args.requests = args.requests or (8 if args.smoke else 32)
    args.max_words = args.max_words or (12 if args.smoke else 120)
    args.repeats = args.repeats or (1 if args.smoke else 3)
    if args.child == "build":
        (kind,) = args.config
        _child_build(args.folder, kind, args.smoke)
    elif args.child in ("js", "transformers"):
        (_child_js if args.child == "js" else _child_transformers)(args.folder, args)
    elif args.child is None:
        return _parent(args)
    else:
        parser.error(f"unknown --child {args.child!r}")
    return 0


def _parent(args: argparse.Namespace) -> int:
    if min(args.rounds, args.repeats, args.new, args.requests, args.batch_size) < 1:
        raise SystemExit("--rounds, --repeats, --new, --requests and --batch-size must be >= 1")
    if not 4 <= args.max_words <= 120:
        raise SystemExit(f"--max-words {args.max_words}: give 4 to 120")
    cores = _cores.pin(["--cores", str(args.cores)] if args.cores else [])
    kinds = list(dict.fromkeys(args.config))
    report: dict = {"cores": len(cores), "smoke": args.smoke, "new": args.new,
                    "requests": args.requests, "batch_size": args.batch_size,
                    "rounds": args.rounds, "repeats": args.repeats, "built": {},
                    "runs": {kind: [] for kind in kinds}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="js-pipelines-") as scratch:
        for kind in kinds:
            folder = Path(scratch) / kind
            smoke = ["--smoke"] if args.smoke else []
            build = ["--child", "build", "--folder", str(folder), "--config", kind, *smoke]
            report["built"][kind] = _children.run(MODULE, build, args.timeout, f"build {kind}")
        for round_ in range(args.rounds):
            for kind in kinds:
                report["runs"][kind].append(_round(Path(scratch) / kind, kind, round_, args))
    report["torch_threads"] = report["runs"][kinds[0]][0]["transformers"]["torch_threads"]
    report["summary"] = summary = summarize(report)
    print(table(summary, report) + "\n", flush=True)
    report["problems"] = check(report)
    for problem in report["problems"]:
        print(f"PROBLEM: {problem}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if report["problems"] else 0


def _round(folder: Path, kind: str, round_: int, args: argparse.Namespace) -> dict:
    """One round for one config: a js and a transformers process, in alternating order."""

    def one(who: str) -> dict:
        argv = ["--child", who, "--folder", str(folder), "--config", kind, *_shape(args)]
        measured = _children.run(MODULE, [*argv, *(["--smoke"] if args.smoke else [])],
                                 args.timeout, f"{who} child")  # fmt: skip
        print(f"round {round_ + 1}: {kind} {who} done", file=sys.stderr, flush=True)
        return measured

    return _children.alternate(round_, one)


if __name__ == "__main__":
    raise SystemExit(main())
