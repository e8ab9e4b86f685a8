"""Encoder-decoder generation: ``model.generate`` of js.models' T5 and Whisper against
transformers' ``generate`` (torch eager) on the same random weights (issue 35).

Usage, from the repository root, with the bench environment's Python (js-models and
transformers installed: ``hatch run bench:python -m tools.bench.seq2seq_generate ...``)::

    python -m tools.bench.seq2seq_generate                      # Flan-T5-small, Whisper-tiny
    python -m tools.bench.seq2seq_generate --cores 2 --rounds 3 --json seq2seq.json
    python -m tools.bench.seq2seq_generate --config whisper-base --batch 8
    python -m tools.bench.seq2seq_generate --beams 4 --batch 1   # beam search (num_beams=4)
    python -m tools.bench.seq2seq_generate --smoke --rounds 1   # tiny models, 8 new tokens

Models, float32, random weights built once by transformers (``torch.manual_seed(0)``,
``save_pretrained`` into a temporary folder) so that js (``js.models.from_pretrained``) and
transformers load the same folder:

- ``flan-t5-small``: ``T5ForConditionalGeneration`` of Flan-T5-small's shape (``FLAN_T5``:
  width 512, 8 layers each side, 6 heads of 64, gated-GELU feed-forward of 1024, a 32128-token
  vocabulary, untied head). The source: ``--prompt`` (64) random token ids (seed 0), no padding;
  the output's decoder start token is not counted.
- ``whisper-tiny`` and ``whisper-base``: ``WhisperForConditionalGeneration`` of their shapes
  (``WHISPER_TINY``: width 384, 4 layers each side, 6 heads; ``WHISPER_BASE``: 512, 6, 8; 80
  mel bins, a 51865-token vocabulary) with a multilingual generation config (``GENERATION``:
  the hub's start, language, task and no-timestamps tokens, suppressed tokens). The source: 30 s
  of features ``[B, 80, 3000]`` (standard normal, seed 0); both are called with
  ``language="en", task="transcribe"`` (the forced prompt of 4 tokens is not counted).

No end token (``eos_token_id`` None in the folder, ``[]`` for js), so both produce exactly
``--new`` (32) tokens per row, greedy (``--beams N``: ``num_beams=N`` in both, where js's
encoder-decoder generation has beam search), batch sizes 1 and 8. ``--cores N`` pins this
process to N cores (children inherit the affinity, which sizes XLA's thread pool) and torch
gets one intra-op thread per core. Every measurement is a fresh Python process; per round and
config, js and transformers in alternating order, each loading the folder then, per batch size:

- js (``--child js``, persistent compilation cache off): the first ``generate`` call (it
  compiles: the encoder, the prefill and the decode loop), then ``--repeats`` warm calls
  (median); the first call minus a warm call is the *cold compile* time;
- transformers (``--child transformers``): ``generate`` under ``torch.inference_mode()``, one
  warm-up call then ``--repeats`` timed calls (median);
- both: time to first token, a warm call with ``max_new_tokens=1`` (encoding the source, the
  decoder's prompt and one token).

Tokens/s = new tokens x batch / seconds. Prints a markdown table (medians over the rounds; the
ratio is the median of each round's transformers / js time); ``--json PATH`` also writes every
measurement. A run that did not produce ``--new`` tokens per row, or js's tokens not equal to
transformers', is a problem (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools.bench import _children, _cores

MODULE = "tools.bench.seq2seq_generate"
NO_EOS = {"eos_token_id": None, "pad_token_id": 0}
FLAN_T5 = {
    "vocab_size": 32128,
    "d_model": 512,
    "d_kv": 64,
    "d_ff": 1024,
    "num_layers": 8,
    "num_decoder_layers": 8,
    "num_heads": 6,
    "feed_forward_proj": "gated-gelu",
    "tie_word_embeddings": False,
    "decoder_start_token_id": 0,
}
WHISPER_TINY: dict = {"d_model": 384, "encoder_layers": 4, "decoder_layers": 4}
WHISPER_TINY.update(encoder_attention_heads=6, decoder_attention_heads=6)
WHISPER_TINY.update(encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80)
WHISPER_BASE = {**WHISPER_TINY, "d_model": 512, "encoder_layers": 6, "decoder_layers": 6}
WHISPER_BASE.update(encoder_attention_heads=8, decoder_attention_heads=8)
WHISPER_BASE.update(encoder_ffn_dim=2048, decoder_ffn_dim=2048)
# The hub's multilingual Whisper generation config, in brief: its special tokens and a few of
# its suppressed ones (both sides suppress the same list).
GENERATION = {
    "decoder_start_token_id": 50258,
    "lang_to_id": {"<|en|>": 50259, "<|fr|>": 50265},
    "task_to_id": {"transcribe": 50359, "translate": 50358},
    "no_timestamps_token_id": 50363,
    "is_multilingual": True,
    "suppress_tokens": [1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63],
    "begin_suppress_tokens": [220, 50257],
}
# initializer_factor 5: weights spread enough that greedy tokens vary (at 1, all are 0)
SMOKE_T5 = {**FLAN_T5, "vocab_size": 128, "d_model": 32, "d_kv": 8, "d_ff": 64}
SMOKE_T5["initializer_factor"] = 5.0
SMOKE_T5.update(num_layers=2, num_decoder_layers=2, num_heads=4)
SMOKE_WHISPER = {"vocab_size": 96, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2}
SMOKE_WHISPER.update(encoder_attention_heads=4, decoder_attention_heads=4, num_mel_bins=80)
SMOKE_WHISPER.update(encoder_ffn_dim=64, decoder_ffn_dim=64, max_target_positions=64)
SMOKE_WHISPER["max_source_positions"] = 32  # 64 feature frames, not the 30 s window
SMOKE_WHISPER["init_std"] = 0.3  # as T5's factor: greedy tokens vary (at 0.02 one repeats)
SMOKE_GENERATION = {
    "decoder_start_token_id": 88,
    "lang_to_id": {"<|en|>": 90, "<|fr|>": 91},
    "task_to_id": {"transcribe": 92, "translate": 93},
    "no_timestamps_token_id": 95,
    "is_multilingual": True,
    "suppress_tokens": [65, 80, 7],
    "begin_suppress_tokens": [59, 2],
}
FULL = {"flan-t5-small": FLAN_T5, "whisper-tiny": WHISPER_TINY, "whisper-base": WHISPER_BASE}
SMOKE = {"flan-t5-small": SMOKE_T5, "whisper-tiny": SMOKE_WHISPER, "whisper-base": SMOKE_WHISPER}
NAMES = {"flan-t5-small": "Flan-T5-small", "whisper-tiny": "Whisper-tiny"}
NAMES["whisper-base"] = "Whisper-base"
WHISPER_CALL = {"language": "en", "task": "transcribe"}


def _whisper(kind: str) -> bool:
    return kind.startswith("whisper")


# ------------------------------------------------------------------------------- children


def _child_build(folder: Path, kinds: list[str], smoke: bool) -> None:
    import torch
    import transformers

    built = {}
    for kind in kinds:  # each into folder/kind
        torch.manual_seed(0)
        options = {**(SMOKE if smoke else FULL)[kind], **NO_EOS}
        if _whisper(kind):
            generation = SMOKE_GENERATION if smoke else GENERATION
            suppressed = {k: generation[k] for k in ("suppress_tokens", "begin_suppress_tokens")}
            config = transformers.WhisperConfig(**options, **suppressed)
            model = transformers.WhisperForConditionalGeneration(config)
            for key, value in generation.items():
                setattr(model.generation_config, key, value)
        else:
            model = transformers.T5ForConditionalGeneration(transformers.T5Config(**options))
        model.generation_config.eos_token_id = None  # neither side stops early
        # read back as written (transformers rebuilds a config marked as the model's from it)
        model.generation_config._from_model_config = False
        model.save_pretrained(folder / kind)
        built[kind] = {"params": sum(p.numel() for p in model.parameters())}
    _children.report(**built)


def source(kind: str, config, batch: int, prompt: int):
    """The source of a batch: Whisper's features ``[B, mel bins, 2 x max_source_positions]``
    (standard normal, seed 0, float32), T5's ``prompt`` random token ids."""
    import numpy as np

    if not _whisper(kind):
        return _children.prompts(batch, prompt, config.vocab_size)
    frames = 2 * config.max_source_positions
    rng = np.random.default_rng(0)
    return rng.standard_normal((batch, config.num_mel_bins, frames)).astype(np.float32)


def _timed(run: Callable[[int], object], new: int, repeats: int) -> dict:
    """A batch's measurements: the first call (its output kept), ``repeats`` warm calls and,
    after one untimed call of that shape, ``repeats`` calls of one new token."""
    begin = time.perf_counter()
    out = run(new)
    first_s = time.perf_counter() - begin
    generate_s, times = _children.median_time(lambda: run(new), repeats)
    run(1)
    ttft_s, _ = _children.median_time(lambda: run(1), repeats)
    return {"out": out, "first_call_s": first_s, "generate_s": generate_s,
            "generate_times_s": times, "ttft_s": ttft_s}  # fmt: skip


def _row(batch: int, measured: dict, skip: int) -> dict:
    """A batch's row: its measurements and new tokens (after the ``skip`` prompt tokens)."""
    tokens = measured.pop("out")[:, skip:]
    return {"batch": batch, **measured, "new_tokens": int(tokens.shape[1]),
            "tokens": tokens.tolist()}  # fmt: skip


def _child_js(folder: Path, kind: str, args: argparse.Namespace) -> None:
    start = time.perf_counter()
    import jax
    import numpy as np

    import js
    import js.models
    from js.models import _generation

    jax.devices()  # XLA's backend starts here, not inside a timed call
    js.disable_compilation_cache()
    imports_s = time.perf_counter() - start
    begin = time.perf_counter()
    model = js.models.from_pretrained(folder)
    jax.block_until_ready([v.value for v in model.parameters()])
    load_s = time.perf_counter() - begin
    call = {"eos_token_id": [], "num_beams": args.beams}
    call.update(WHISPER_CALL if _whisper(kind) else {})
    rows = []
    for batch in args.batch:
        inputs = source(kind, model.config, batch, args.prompt)

        def run(new: int, inputs=inputs):
            return np.asarray(model.generate(inputs, max_new_tokens=new, **call))

        traces = dict(_generation.TRACES)
        measured = _timed(run, args.new, args.repeats)
        traced = {k: v - traces.get(k, 0) for k, v in _generation.TRACES.items()}
        measured["traced"] = {k: v for k, v in traced.items() if v}
        measured["compile_s"] = measured["first_call_s"] - measured["generate_s"]
        rows.append(_row(batch, measured, 0 if _whisper(kind) else 1))
    params = sum(p.value.size for p in {id(p): p for p in model.parameters()}.values())
    _children.report(imports_s=imports_s, load_s=load_s, params=params,
                     cores=len(_cores.available()), rows=rows)  # fmt: skip


def _child_transformers(folder: Path, kind: str, args: argparse.Namespace) -> None:
    start = time.perf_counter()
    threads = _cores.match_torch()
    import torch
    import transformers

    imports_s = time.perf_counter() - start
    begin = time.perf_counter()
    cls = "WhisperForConditionalGeneration" if _whisper(kind) else "T5ForConditionalGeneration"
    model = getattr(transformers, cls).from_pretrained(folder).eval()
    with torch.no_grad():  # every weight read once: a memory-mapped one is loaded here
        sum(float(p.float().sum()) for p in model.parameters())
    load_s = time.perf_counter() - begin
    call = {"do_sample": False, "num_beams": args.beams}
    call.update(WHISPER_CALL if _whisper(kind) else {})
    rows = []
    for batch in args.batch:
        inputs = torch.tensor(source(kind, model.config, batch, args.prompt))
        # T5's source all real (transformers would mask every id equal to the pad token)
        mask = {} if _whisper(kind) else {"attention_mask": torch.ones_like(inputs)}

        def run(new: int, inputs=inputs, mask=mask):
            with torch.inference_mode():
                return model.generate(inputs, max_new_tokens=new, **mask, **call).numpy()

        measured = _timed(run, args.new, args.repeats)
        rows.append(_row(batch, measured, 0 if _whisper(kind) else 1))
    _children.report(imports_s=imports_s, load_s=load_s, torch_threads=threads,
                     params=sum(p.numel() for p in model.parameters()),
                     cores=len(_cores.available()), rows=rows)  # fmt: skip


# --------------------------------------------------------------------------------- parent


def measure(folder: Path, kind: str, round_: int, args: argparse.Namespace) -> dict:
    """One round for one config: js and transformers in alternating order."""

    def one(who: str) -> dict:
        measured = _children.child(MODULE, who, folder, args, "--config", kind)
        print(f"round {round_ + 1}: {kind} {who} done", file=sys.stderr, flush=True)
        return measured

    return _children.alternate(round_, one)


def summarize(report: dict) -> list[dict]:
    """One row per config and batch size: medians over the rounds."""
    out = []
    for kind, rounds in report["runs"].items():
        for batch in report["batch"]:
            js = _children.rows(rounds, "js", batch)
            out.append({
                "config": kind,
                "params": report["built"][kind]["params"],
                "batch": batch,
                **_children.paired(rounds, batch, report["new"] * batch),
                "compile_cold_s": _children.med(r["compile_s"] for r in js),
                "js_load_s": _children.med(runs["js"]["load_s"] for runs in rounds),
                "hf_load_s": _children.med(runs["transformers"]["load_s"] for runs in rounds),
            })  # fmt: skip
    return out


def table(summary: list[dict], report: dict) -> str:
    beams = report["beams"]
    search = "Greedy" if beams == 1 else f"Beam search ({beams} beams)"
    frames = "64 feature frames" if report["smoke"] else "30 s of features"
    lines = [
        f"{search}, float32, T5 source {report['prompt']} tokens, Whisper {frames}, "
        f"{report['new']} new tokens, {report['rounds']} rounds, {report['cores']} cores, torch "
        f"threads {report['torch_threads']}; TTFT: one new token (encoding included); compile: "
        "first call minus a warm call",
        "",
        "| model | batch | js tok/s | transformers tok/s | js / transformers | js TTFT ms "
        "| transformers TTFT ms | js compile s | js load s | transformers load s "
        "| tokens equal |",
        "|---" * 11 + "|",
    ]
    for s in summary:
        name = f"{NAMES[s['config']]} {s['params'] / 1e6:.1f}M"
        equal = "yes" if s["tokens_equal"] else f"no ({100 * s['token_agreement']:.0f}% rows)"
        lines.append(
            f"| {name} | {s['batch']} | {s['js_tokens_per_s']:.1f} | {s['hf_tokens_per_s']:.1f} "
            f"| {s['ratio']:.2f}x | {1e3 * s['js_ttft_s']:.0f} | {1e3 * s['hf_ttft_s']:.0f} "
            f"| {s['compile_cold_s']:.2f} | {s['js_load_s']:.2f} | {s['hf_load_s']:.2f} "
            f"| {equal} |"
        )
    return "\n".join(lines)


def check(report: dict) -> list[str]:
    """Problems: a run without ``new`` tokens per row, or js's tokens not transformers'."""
    problems = _children.count_problems(report, report["new"])
    for s in report["summary"]:
        if not s["tokens_equal"]:
            problems.append(
                f"{s['config']} batch {s['batch']}: js's tokens differ from transformers' in "
                f"{100 * (1 - s['token_agreement']):.0f}% of the rows"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _children.arguments(parser, FULL, ["flan-t5-small", "whisper-tiny"])
    parser.add_argument("--prompt", type=int, help="T5's source tokens (64; smoke 16)")
    parser.add_argument("--new", type=int, help="new tokens (32; smoke 8)")
    parser.add_argument("--repeats", type=int, help="timed calls per measurement (3; smoke 1)")
    parser.add_argument("--smoke", action="store_true", help="tiny models, 16 + 8 tokens")
    args = parser.parse_args(argv)
    args.batch = args.batch or [1, 8]
    args.prompt = args.prompt or (16 if args.smoke else 64)
    args.new = args.new or (8 if args.smoke else 32)
    args.repeats = args.repeats or (1 if args.smoke else 3)
    if args.child == "build":
        _child_build(args.folder, args.config, args.smoke)
    elif args.child in ("js", "transformers"):
        (kind,) = args.config
        (_child_js if args.child == "js" else _child_transformers)(args.folder, kind, args)
    elif args.child is None:
        return _parent(args)
    else:
        parser.error(f"unknown --child {args.child!r}")
    return 0


def _parent(args: argparse.Namespace) -> int:
    if args.rounds < 1 or args.repeats < 1 or args.new < 2 or args.beams < 1:
        raise SystemExit("--rounds, --repeats and --beams must be >= 1 and --new >= 2")
    cores = _cores.pin(["--cores", str(args.cores)] if args.cores else [])
    kinds = list(dict.fromkeys(args.config))
    report: dict = {"cores": len(cores), "smoke": args.smoke, "prompt": args.prompt,
                    "new": args.new, "batch": args.batch, "beams": args.beams,
                    "rounds": args.rounds, "repeats": args.repeats,
                    "runs": {kind: [] for kind in kinds}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="js-seq2seq-") as scratch:
        report["built"] = _children.build(MODULE, Path(scratch), kinds, args.smoke, args.timeout)
        for round_ in range(args.rounds):
            for kind in kinds:
                report["runs"][kind].append(measure(Path(scratch) / kind, kind, round_, args))
    report["torch_threads"] = report["runs"][kinds[0]][0]["transformers"]["torch_threads"]
    report["summary"] = summary = summarize(report)
    print(table(summary, report) + "\n", flush=True)
    report["problems"] = check(report)
    for problem in report["problems"]:
        print(f"PROBLEM: {problem}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
