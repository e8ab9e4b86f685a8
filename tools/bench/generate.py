"""Greedy generation: ``js.models.generate`` against transformers' ``generate`` (torch eager),
the compile time of js's two programs, and what bounds js's decode step.

Usage, from the repository root, with the bench environment's Python (js-models and
transformers installed: ``hatch run bench:python -m tools.bench.generate ...``)::

    python -m tools.bench.generate                            # GPT-2 124M and a 112M Llama
    python -m tools.bench.generate --cores 2 --rounds 3 --json generate.json
    python -m tools.bench.generate --config gpt2 --batch 8    # one config, one batch size
    python -m tools.bench.generate --smoke --rounds 1         # tiny models, 16 + 8 tokens
    python -m tools.bench.generate --config qwen3 gemma3 --prompt 32 --new 32 --rounds 1
    python -m tools.bench.generate --beams 4 --batch 1 4      # beam search (num_beams=4)

Models: ``GPT2Config()`` (the 124M defaults) and a Llama-family config of about 100M
parameters (``LLAMA``: 10 layers, width 768, grouped-query attention with 4 key/value heads,
a 32000-token vocabulary), and on request ``qwen3`` and ``gemma3``, Qwen3-0.6B's and
Gemma-3-1B's shapes (``QWEN3``, ``GEMMA3``: their hub configs), all float32 with random
weights: transformers builds each once
(``torch.manual_seed(0)``, ``save_pretrained`` into a temporary folder) and js loads the same
folder with ``js.models.from_pretrained``, so both hold identical weights. The configs say
``eos_token_id=None`` and ``pad_token_id=0`` and js is given ``eos_token_id=[]``, so that
neither stops early: every run checks that both produce exactly ``--new`` tokens per row, and
the report says whether js's tokens equal transformers'. Prompts are random ids (seed 0), no
padding: ``--prompt`` (64) tokens, ``--new`` (128) new tokens, greedy (``--beams N``: beam
search, ``num_beams=N`` in both; tokens/s counts the returned rows), batch sizes 1 and 8.

Every measurement is a fresh Python process; the parent imports neither jax nor torch. Each
child first times its load of the folder (``from_pretrained`` until every weight is read:
js's arrays ready, each of torch's parameters summed once, since transformers may return
memory-mapped weights not yet read).
``--cores N`` pins this process to N cores (children inherit the affinity, which sizes XLA's
thread pool) and torch gets one intra-op thread per core (``_cores.match_torch``). Per round
and config, in alternating order:

- js (``--child js``, persistent compilation cache off): per batch size, the first
  ``generate`` call of the process, then ``--repeats`` warm calls (median): tokens/s = new
  tokens x batch / seconds. The first call minus a warm call is the *cold compile* time
  (tracing, lowering and XLA compiling the prefill and the decode program). Time to first
  token: a warm call with ``max_new_tokens=1`` (the prefill alone). Then the decode step alone:
  ``js.jit(lambda m, c, ids: m(ids, cache=c, logits_to_keep=1))`` after a prefill of the same
  prompt into ``model.make_cache(B, P + N)`` (the cache ``generate`` uses: the buckets of the
  prompt and of the new tokens), lowered and compiled for XLA's ``cost_analysis()`` (flops,
  bytes accessed), and timed over a few calls. The first config's process also measures the
  machine once: a 2048x2048 float32 matmul's FLOP/s and a 512 MiB float32 array's copy
  (``x + 1``: read and write) GB/s, the roofline the decode step is held against.
- transformers (``--child transformers``): ``model.generate`` under ``torch.inference_mode()``,
  the same prompts, one warm-up call then ``--repeats`` timed calls (median), and
  ``max_new_tokens=1`` for the time to first token.
- js with the compilation cache (after both): one process fills an empty directory
  (``js.enable_compilation_cache``), then a fresh process pointed at it makes the same calls:
  its first call minus a warm call is the *warm compile* time (tracing and lowering still run;
  XLA's programs come from disk). It reports how many files it added to the cache (0 expected).

The decode table: flops and bytes of one step (``cost_analysis``); weights + KV cache bytes per
step (the weights once for the batch, ``cache.nbytes`` for every row's cache) and per token
(every weight counts, though a step reads one row of an input embedding that is not tied to the
head: of Llama's 452 MB, 98 MB; XLA's bytes accessed count only that row);
decode steps/s in ``generate`` (``N - 1`` steps in the time of a warm call minus the time to
first token); the FLOP/s and the bandwidth (weights + cache bytes x steps/s) that implies, as
fractions of the machine's matmul FLOP/s and copy GB/s; the bound is the larger fraction.

Prints markdown tables (medians over the rounds; the js/transformers ratio is the median of
each round's ratio); ``--json PATH`` also writes every measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tools.bench import _children, _cores
from tools.bench._children import med as _med
from tools.bench._children import median_time as _median_time
from tools.bench._children import prompts as _prompts
from tools.bench._children import report as _report

MODULE = "tools.bench.generate"
# Neither model stops early: no end token, and the pad token transformers asks for is 0.
NO_EOS = {"eos_token_id": None, "pad_token_id": 0}
GPT2: dict = {}  # GPT2Config() defaults: 124M, n_positions 1024
LLAMA = {
    "vocab_size": 32000,
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 10,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "bos_token_id": 1,
}
SMOKE = {
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 128},
    "llama": {
        "vocab_size": 1000,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "bos_token_id": 1,
    },
}
# Qwen3-0.6B's and Gemma-3-1B's shapes (their hub config.json), random weights.
QWEN3 = {
    "vocab_size": 151936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
}
GEMMA3 = {
    "vocab_size": 262144,
    "hidden_size": 1152,
    "intermediate_size": 6912,
    "num_hidden_layers": 26,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "max_position_embeddings": 32768,
    "query_pre_attn_scalar": 256,
    "sliding_window": 512,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
}
_SMALL = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
}
SMOKE["qwen3"] = {**_SMALL, "head_dim": 16}
SMOKE["gemma3"] = {**_SMALL, "head_dim": 16, "sliding_window": 8}
FULL = {"gpt2": GPT2, "llama": LLAMA, "qwen3": QWEN3, "gemma3": GEMMA3}
NAMES = {"gpt2": "GPT-2", "llama": "Llama", "qwen3": "Qwen3-0.6B", "gemma3": "Gemma-3-1B"}
# transformers' (config class, model class) of each kind
CLASSES = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
}
MATMUL = 2048  # the roofline's matmul: [n, n] @ [n, n], float32
COPY_MIB = 512  # the roofline's copy: a float32 array of this many MiB
STEP_CALLS = 8  # timed calls of the decode step alone


# ------------------------------------------------------------------------------- children


def _config(kind: str, smoke: bool):
    import transformers

    options = {**(SMOKE if smoke else FULL)[kind], **NO_EOS}
    return getattr(transformers, CLASSES[kind][0])(**options)


def _child_build(folder: Path, kinds: list[str], smoke: bool) -> None:
    import torch
    import transformers

    built = {}
    for kind in kinds:  # each into folder/kind
        torch.manual_seed(0)
        config = _config(kind, smoke)
        model = getattr(transformers, CLASSES[kind][1])(config)
        model.save_pretrained(folder / kind)
        built[kind] = {"params": sum(p.numel() for p in model.parameters())}
    _report(**built)


def _cost(compiled) -> dict[str, float]:
    """XLA's estimate for a compiled program: flops and bytes accessed."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):  # older jax: one dict per device program
        cost = cost[0]
    return {"flops": float(cost.get("flops", 0.0)), "bytes": float(cost.get("bytes accessed", 0))}


def _roofline() -> dict[str, float]:
    """This process's matmul FLOP/s and copy bytes/s (read + write), medians of a few calls."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (MATMUL, MATMUL), jnp.float32)
    matmul = jax.jit(jnp.matmul)
    matmul(a, a).block_until_ready()
    seconds, _ = _median_time(lambda: matmul(a, a).block_until_ready(), 5)
    # in place (the input donated): no fresh 512 MiB to fault in on every call
    copy = jax.jit(lambda x: x + 1.0, donate_argnums=0)
    x = copy(jnp.zeros((COPY_MIB * 2**20 // 4,), jnp.float32)).block_until_ready()
    times = []
    for _ in range(5):
        begin = time.perf_counter()
        x = copy(x).block_until_ready()
        times.append(time.perf_counter() - begin)
    return {
        "matmul_flops_per_s": 2 * MATMUL**3 / seconds,
        "copy_bytes_per_s": 2 * x.nbytes / statistics.median(times),
    }


def _weights_nbytes(model) -> int:
    seen, total = set(), 0
    for variable in [*model.parameters(), *model.buffers()]:
        if id(variable) not in seen:  # a tied parameter has two names
            seen.add(id(variable))
            total += variable.value.nbytes
    return total


def _params(model) -> int:
    seen, total = set(), 0
    for variable in model.parameters():
        if id(variable) not in seen:
            seen.add(id(variable))
            total += variable.value.size
    return total


def _cache_files(directory: Path | None) -> int:
    return 0 if directory is None else sum(1 for p in directory.rglob("*") if p.is_file())


def _child_js(folder: Path, args: argparse.Namespace) -> None:
    start = time.perf_counter()
    import jax
    import numpy as np

    import js
    import js.models
    from js.models import _generation

    jax.devices()  # XLA's backend starts here, not inside a timed call
    cache_dir = args.cache_dir
    if cache_dir is None:
        js.disable_compilation_cache()
    else:
        js.enable_compilation_cache(cache_dir)
    files_before = _cache_files(cache_dir)
    imports_s = time.perf_counter() - start
    begin = time.perf_counter()
    model = js.models.from_pretrained(folder)
    vocab = model.config.vocab_size
    jax.block_until_ready([v.value for v in model.parameters()])
    load_s = time.perf_counter() - begin
    rows = []
    for batch in args.batch:
        ids = _prompts(batch, args.prompt, vocab)

        def run(new: int, ids=ids):
            return np.asarray(
                js.models.generate(
                    model, ids, max_new_tokens=new, eos_token_id=[], num_beams=args.beams
                )
            )

        traces = dict(_generation.TRACES)
        begin = time.perf_counter()
        out = run(args.new)
        first_s = time.perf_counter() - begin
        traced = {
            k: _generation.TRACES[k] - traces.get(k, 0) for k in ("prefill", "decode", "beam")
        }
        generate_s, times = _median_time(lambda run=run: run(args.new), args.repeats)
        row = {
            "batch": batch,
            "first_call_s": first_s,
            "generate_s": generate_s,
            "generate_times_s": times,
            "compile_s": first_s - generate_s,
            "traced": traced,
            "new_tokens": int(out.shape[1] - args.prompt),
            "tokens": out[:, args.prompt :].tolist(),
        }
        if args.cache_dir is None:  # the measuring process (the cache processes only compile)
            run(1)  # another prefill program (slots for 1 token) and cache size
            row["ttft_s"], _ = _median_time(lambda run=run: run(1), args.repeats)
            # with beams, the step runs batch * beams rows
            row.update(_decode_step(model, np.repeat(ids, args.beams, axis=0), args))
        rows.append(row)
    report = {
        "imports_s": imports_s,
        "load_s": load_s,
        "params": _params(model),
        "weights_bytes": _weights_nbytes(model),
        "cores": len(_cores.available()),
        "cache_files_added": _cache_files(cache_dir) - files_before,
        "rows": rows,
    }
    if args.roofline:
        report["roofline"] = _roofline()
    _report(**report)


def _decode_step(model, ids, args: argparse.Namespace) -> dict:
    """The cached decode step alone, after a prefill of ``ids`` into ``generate``'s cache size:
    XLA's cost analysis, the cache's bytes, and the step's seconds (median of a few calls)."""
    import jax
    import jax.numpy as jnp

    import js
    from js.models._generation import bucket

    batch = ids.shape[0]
    cache = model.make_cache(batch, bucket(args.prompt) + bucket(args.new))
    prefill = js.jit(lambda m, c, ids: m(ids, cache=c, logits_to_keep=1))
    step = js.jit(lambda m, c, ids: m(ids, cache=c, logits_to_keep=1))
    token = jnp.argmax(prefill(model, cache, jnp.asarray(ids, jnp.int32))[:, -1], -1)[:, None]
    begin = time.perf_counter()
    compiled = step.lower(model, cache, token).compile()
    compile_s = time.perf_counter() - begin
    calls = min(STEP_CALLS, bucket(args.new) - 1)  # the cache holds bucket(new) more tokens

    def one():
        nonlocal token
        token = jnp.argmax(step(model, cache, token)[:, -1], -1)[:, None]
        jax.block_until_ready(token)

    one()  # js.jit's own compile of the same program
    step_s, _ = _median_time(one, max(1, calls - 1))
    return {
        "step_compile_s": compile_s,
        "step_s": step_s,
        "cache_bytes": cache.nbytes,
        "cache_length": cache.layers[0].k.value.shape[2],
        **{f"step_{k}": v for k, v in _cost(compiled).items()},
    }


def _child_transformers(folder: Path, args: argparse.Namespace) -> None:
    start = time.perf_counter()
    threads = _cores.match_torch()
    import torch
    from transformers import AutoModelForCausalLM

    imports_s = time.perf_counter() - start
    begin = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():  # every weight read once: a memory-mapped one is loaded here
        sum(float(p.float().sum()) for p in model.parameters())
    load_s = time.perf_counter() - begin
    vocab = model.config.vocab_size
    rows = []
    for batch in args.batch:
        ids = torch.tensor(_prompts(batch, args.prompt, vocab))
        mask = torch.ones_like(ids)

        def run(new: int, ids=ids, mask=mask):
            with torch.inference_mode():
                return model.generate(
                    ids,
                    attention_mask=mask,
                    max_new_tokens=new,
                    do_sample=False,
                    eos_token_id=None,
                    pad_token_id=0,
                    num_beams=args.beams,
                )

        out = run(args.new)  # warm-up
        generate_s, times = _median_time(lambda run=run: run(args.new), args.repeats)
        run(1)
        ttft_s, _ = _median_time(lambda run=run: run(1), args.repeats)
        rows.append(
            {
                "batch": batch,
                "generate_s": generate_s,
                "generate_times_s": times,
                "ttft_s": ttft_s,
                "new_tokens": int(out.shape[1] - args.prompt),
                "tokens": out[:, args.prompt :].tolist(),
            }
        )
    _report(
        imports_s=imports_s,
        load_s=load_s,
        params=sum(p.numel() for p in model.parameters()),
        torch_threads=threads,
        cores=len(_cores.available()),
        rows=rows,
    )


# --------------------------------------------------------------------------------- parent


def measure(folder: Path, kind: str, round_: int, args, scratch: Path, roofline: bool) -> dict:
    """One round for one config: js (cache off) and transformers in alternating order, then a
    process filling an empty compilation cache and one reading it."""

    def one(who: str) -> dict:
        extra = ["--roofline"] if who == "js" and roofline else []
        measured = _children.child(MODULE, who, folder, args, *extra)
        print(f"round {round_ + 1}: {kind} {who} done", file=sys.stderr, flush=True)
        return measured

    runs = _children.alternate(round_, one)
    cache = scratch / f"cache-{kind}-{round_}"
    # the filling process's times are not used: one warm call is enough
    fill = ("--cache-dir", str(cache), "--repeats", "1")
    runs["js_fill"] = _children.child(MODULE, "js", folder, args, *fill)
    runs["js_warm"] = _children.child(MODULE, "js", folder, args, "--cache-dir", str(cache))
    print(f"round {round_ + 1}: {kind} js with the cache done", file=sys.stderr, flush=True)
    return runs


def check(report: dict, new: int) -> list[str]:
    """Problems: a run that did not produce ``new`` tokens per row, or a warm process that had
    to compile (added files to the cache). Tokens that differ are reported, not problems."""
    problems = _children.count_problems(report, new)
    for kind, rounds in report["runs"].items():
        for i, runs in enumerate(rounds):
            if runs["js_warm"]["cache_files_added"]:
                problems.append(
                    f"{kind} round {i + 1}: the warm-cache process added "
                    f"{runs['js_warm']['cache_files_added']} files to the cache (it compiled)"
                )
    return problems


def summarize(report: dict) -> list[dict]:
    """One row per config and batch size: medians over the rounds."""
    new, out = report["new"], []
    every = [runs["js"] for rounds in report["runs"].values() for runs in rounds]
    roofs = [js["roofline"] for js in every if "roofline" in js]
    matmul = _med(r["matmul_flops_per_s"] for r in roofs) if roofs else float("nan")
    copy = _med(r["copy_bytes_per_s"] for r in roofs) if roofs else float("nan")
    for kind, rounds in report["runs"].items():
        weights = rounds[0]["js"]["weights_bytes"]
        for batch in report["batch"]:
            js = _children.rows(rounds, "js", batch)
            warm = _children.rows(rounds, "js_warm", batch)
            tokens = new * batch
            steps = [
                (new - 1) / (r["generate_s"] - r["ttft_s"])
                if r["generate_s"] > r["ttft_s"]
                else new / r["generate_s"]
                for r in js
            ]
            step_bytes = weights + js[0]["cache_bytes"]
            flops_per_s = js[0]["step_flops"] * _med(steps)
            bytes_per_s = step_bytes * _med(steps)
            out.append(
                {
                    "config": kind,
                    "params": rounds[0]["js"]["params"],
                    "batch": batch,
                    **_children.paired(rounds, batch, tokens),
                    "js_load_s": _med(runs["js"]["load_s"] for runs in rounds),
                    "hf_load_s": _med(runs["transformers"]["load_s"] for runs in rounds),
                    "compile_cold_s": _med(r["compile_s"] for r in js),
                    "compile_warm_s": _med(r["compile_s"] for r in warm),
                    "step_flops": js[0]["step_flops"],
                    "step_bytes_accessed": js[0]["step_bytes"],
                    "weights_bytes": weights,
                    "cache_bytes": js[0]["cache_bytes"],
                    "bytes_per_step": step_bytes,
                    "bytes_per_token": step_bytes / batch,
                    "decode_steps_per_s": _med(steps),
                    "step_alone_s": _med(r["step_s"] for r in js),
                    "flops_per_s": flops_per_s,
                    "bytes_per_s": bytes_per_s,
                    "matmul_flops_per_s": matmul,
                    "copy_bytes_per_s": copy,
                    "flops_fraction": flops_per_s / matmul,
                    "bytes_fraction": bytes_per_s / copy,
                }
            )
    return out


def tables(summary: list[dict], report: dict) -> str:
    """The throughput table and the decode step's cost, markdown."""
    first = summary[0]
    beams = report.get("beams", 1)
    search = "Greedy" if beams == 1 else f"Beam search ({beams} beams)"
    lines = [
        f"{search}, float32, prompt {report['prompt']} tokens, {report['new']} new tokens, "
        f"{report['rounds']} rounds, {report['cores']} cores, torch threads "
        f"{report['torch_threads']}; compile: first call minus a warm call",
        "",
        "| model | batch | js tok/s | transformers tok/s | js / transformers | js TTFT ms "
        "| transformers TTFT ms | js compile cold s | js compile warm (cache) s | tokens equal |",
        "|---" * 10 + "|",
    ]
    for s in summary:
        name = f"{NAMES[s['config']]} {s['params'] / 1e6:.1f}M"
        equal = "yes" if s["tokens_equal"] else f"no ({100 * s['token_agreement']:.0f}% rows)"
        lines.append(
            f"| {name} | {s['batch']} | {s['js_tokens_per_s']:.1f} | {s['hf_tokens_per_s']:.1f} "
            f"| {s['ratio']:.2f}x | {1e3 * s['js_ttft_s']:.0f} | {1e3 * s['hf_ttft_s']:.0f} "
            f"| {s['compile_cold_s']:.2f} | {s['compile_warm_s']:.2f} | {equal} |"
        )
    lines += [
        "",
        "Loading the folder (from_pretrained until every weight is read; medians over rounds)",
        "",
        "| model | js load s | transformers load s | js / transformers |",
        "|---" * 4 + "|",
    ]
    for s in summary:
        if s["batch"] == summary[0]["batch"] or s is summary[0]:
            lines.append(
                f"| {NAMES[s['config']]} | {s['js_load_s']:.2f} | {s['hf_load_s']:.2f} "
                f"| {s['js_load_s'] / s['hf_load_s']:.2f}x |"
            )
    lines += [
        "",
        f"Decode step (js, one token per row; XLA cost_analysis). Machine: {MATMUL}x{MATMUL} "
        f"float32 matmul {first['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s, {COPY_MIB} MiB copy "
        f"{first['copy_bytes_per_s'] / 1e9:.1f} GB/s (read + write)",
        "",
        "| model | batch | GFLOP/step | XLA bytes accessed MB/step | weights + KV MB/step "
        "| KV cache MB | MB/token | decode steps/s | step alone ms | GFLOP/s | of matmul "
        "| GB/s | of copy | bound |",
        "|---" * 14 + "|",
    ]
    for s in summary:
        bound = "memory" if s["bytes_fraction"] >= s["flops_fraction"] else "compute"
        lines.append(
            f"| {NAMES[s['config']]} | {s['batch']} | {s['step_flops'] / 1e9:.3f} "
            f"| {s['step_bytes_accessed'] / 1e6:.0f} | {s['bytes_per_step'] / 1e6:.0f} "
            f"| {s['cache_bytes'] / 1e6:.1f} | {s['bytes_per_token'] / 1e6:.1f} "
            f"| {s['decode_steps_per_s']:.1f} | {1e3 * s['step_alone_s']:.1f} "
            f"| {s['flops_per_s'] / 1e9:.1f} | {100 * s['flops_fraction']:.0f}% "
            f"| {s['bytes_per_s'] / 1e9:.1f} | {100 * s['bytes_fraction']:.0f}% | {bound} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _children.arguments(parser, FULL, ["gpt2", "llama"])
    parser.add_argument("--prompt", type=int, help="prompt tokens (64; smoke 16)")
    parser.add_argument("--new", type=int, help="new tokens (128; smoke 8)")
    parser.add_argument("--repeats", type=int, help="timed calls per measurement (3; smoke 2)")
    parser.add_argument("--smoke", action="store_true", help="tiny GPT-2 and Llama, 16 + 8")
    parser.add_argument("--cache-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--roofline", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.batch = args.batch or [1, 8]
    args.prompt = args.prompt or (16 if args.smoke else 64)
    args.new = args.new or (8 if args.smoke else 128)
    args.repeats = args.repeats or (2 if args.smoke else 3)
    if args.child == "build":
        _child_build(args.folder, args.config, args.smoke)
    elif args.child == "js":
        _child_js(args.folder, args)
    elif args.child == "transformers":
        _child_transformers(args.folder, args)
    elif args.child is None:
        return _parent(args)
    else:
        parser.error(f"unknown --child {args.child!r}")
    return 0


def _parent(args: argparse.Namespace) -> int:
    if args.rounds < 1 or args.repeats < 1 or args.new < 2:
        raise SystemExit("--rounds and --repeats must be >= 1 and --new >= 2")
    cores = _cores.pin(["--cores", str(args.cores)] if args.cores else [])
    kinds = list(dict.fromkeys(args.config))
    report: dict = {
        "cores": len(cores),
        "smoke": args.smoke,
        "prompt": args.prompt,
        "new": args.new,
        "batch": args.batch,
        "beams": args.beams,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "built": {},
        "runs": {kind: [] for kind in kinds},
    }
    with tempfile.TemporaryDirectory(prefix="js-generate-") as scratch:
        report["built"] = _children.build(MODULE, Path(scratch), kinds, args.smoke, args.timeout)
        for kind, built in report["built"].items():
            print(f"{kind}: {built['params'] / 1e6:.1f}M parameters", file=sys.stderr, flush=True)
        for round_ in range(args.rounds):
            for i, kind in enumerate(kinds):
                runs = measure(Path(scratch) / kind, kind, round_, args, Path(scratch), i == 0)
                report["runs"][kind].append(runs)
    report["torch_threads"] = report["runs"][kinds[0]][0]["transformers"]["torch_threads"]
    report["summary"] = summary = summarize(report)
    print(tables(summary, report) + "\n", flush=True)
    report["problems"] = check(report, args.new)
    for problem in report["problems"]:
        print(f"PROBLEM: {problem}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
