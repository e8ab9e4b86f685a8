"""Encoders: ``js.models.SentenceTransformer.encode`` against sentence-transformers, and the image
features of a ViT and a DINOv2 against transformers (issue 34's throughput).

Usage, from the repository root, with the models environment's Python (js-models, torch,
transformers and sentence-transformers installed:
``hatch run models:python -m tools.bench.encoders ...``)::

    python -m tools.bench.encoders                            # all three workloads, 2 rounds
    python -m tools.bench.encoders --cores 2 --rounds 3 --json encoders.json
    python -m tools.bench.encoders --only minilm              # minilm, vit and/or dinov2
    python -m tools.bench.encoders --smoke --rounds 1         # tiny models, tiny batches

Models, float32 with random weights, built once by transformers (``torch.manual_seed(0)``,
``save_pretrained`` into a temporary folder, or into ``--folder DIR``, kept and reused), so that
js and the reference load the same folder:

- ``minilm``: a sentence-transformers folder of all-MiniLM-L6-v2's shape (``MINILM``: BERT,
  hidden 384, 6 layers, 12 heads, intermediate 1536, a 30522-token vocabulary; mean pooling
  and Normalize; ``max_seq_length`` 128). Its tokenizer is a WordPiece vocabulary of whole
  words ``w0``, ``w1``, ...: each sentence is 126 such words, exactly 128 tokens with [CLS] and
  [SEP] (each child checks the count), so both sides tokenize the texts in ``encode`` and run
  full batches of 32 x 128 with no padding. js: ``SentenceTransformer(folder).encode(texts,
  batch_size=32)``; the reference: sentence-transformers' ``encode`` (torch, under
  ``torch.inference_mode()``). Items: sentences.
- ``vit``: ``ViTModel(ViTConfig())`` (ViT-B/16, 224x224, 86M parameters, with its pooler);
- ``dinov2``: ``Dinov2Model`` of DINOv2-S/14's shape (``DINOV2``: hidden 384, 12 layers, 6
  heads, the hub's 518-pixel position table resized to the 224x224 images' 16x16 grid inside
  the forward, as facebook/dinov2-small runs at 224). js: ``js.models.from_pretrained`` and one
  ``js.jit`` program of ``model(pixels)`` (both outputs ready); the reference: the model under
  ``torch.inference_mode()`` (transformers' default attention, sdpa). Items: images, a batch of
  8 random images per call (``FULL["image"]``).

Every measurement is a fresh Python process; the parent imports neither jax nor torch. Per
round one js process and one reference process (order alternating) run the workloads in turn:
each loads its folder, makes a first call (js compiles here: the first call's seconds), then
``--repeats`` timed calls of the same inputs (median). Throughput = items per call / median
seconds. Each child writes its first call's output (the embeddings, the last hidden state) to
the folder; the report gives js's largest difference from the reference relative to the
output's scale. ``--cores N`` pins this process to N cores (children inherit the affinity,
which sizes XLA's thread pool) and torch gets one intra-op thread per core
(``_cores.match_torch``).

Prints a markdown table (medians over the rounds; the js/reference ratio is the median of each
round's ratio); ``--json PATH`` also writes every measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tools.bench import (
    _children,  # the model benches' child protocol
    _cores,
)

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tools.bench.encoders"
WORKLOADS = ("minilm", "vit", "dinov2")
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # BERT's first five ids
MINILM = {
    "vocab_size": 30522,
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 512,
}
VIT: dict = {}  # ViTConfig() defaults: ViT-B/16 at 224
DINOV2 = {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 6, "image_size": 518}
# Per size: the configs, sentences per call (batch, tokens, count), images per call (batch, side)
FULL = {
    "configs": {"minilm": MINILM, "vit": VIT, "dinov2": DINOV2},
    "text": (32, 128, 64),
    "image": (8, 224),
}
SMOKE = {
    "configs": {
        "minilm": {
            "vocab_size": 200,
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 64,
            "max_position_embeddings": 64,
        },
        "vit": {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 64,
            "image_size": 32,
            "patch_size": 8,
        },
        "dinov2": {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": 48,
            "patch_size": 8,
        },
    },
    "text": (4, 16, 8),
    "image": (2, 32),
}
REFERENCE = {"minilm": "sentence-transformers", "vit": "transformers", "dinov2": "transformers"}


def _size(smoke: bool) -> dict:
    return SMOKE if smoke else FULL


def _texts(size: dict) -> list[str]:
    """``count`` sentences of ``tokens - 2`` whole-word tokens each (seed 0)."""
    _, tokens, count = size["text"]
    words = size["configs"]["minilm"]["vocab_size"] - len(SPECIAL)
    ids = np.random.default_rng(0).integers(0, words, (count, tokens - 2))
    return [" ".join(f"w{i}" for i in row) for row in ids]


def _pixels(size: dict) -> np.ndarray:
    batch, side = size["image"]
    return np.random.default_rng(0).standard_normal((batch, 3, side, side)).astype(np.float32)


def _report(**fields) -> None:
    print("RESULT " + json.dumps(fields), flush=True)


def _timed(call: Callable[[], object], repeats: int) -> tuple[float, object, float]:
    """``(first call's seconds, its output, median seconds of `repeats` more calls)``."""
    begin = time.perf_counter()
    out = call()
    first = time.perf_counter() - begin
    seconds = []
    for _ in range(repeats):
        begin = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - begin)
    return first, out, statistics.median(seconds)


# ------------------------------------------------------------------------------- children


def _child_build(folder: Path, size: dict, only: list[str]) -> None:
    sys.modules["torchvision"] = None  # type: ignore[assignment]  # its wheel here cannot import
    import torch
    import transformers

    torch.manual_seed(0)
    params = {}
    configs = size["configs"]
    if "minilm" in only:
        params["minilm"] = _build_minilm(folder, configs["minilm"], size["text"][1])
    for name, config_class in (("vit", "ViTConfig"), ("dinov2", "Dinov2Config")):
        if name in only:
            config = getattr(transformers, config_class)(**configs[name])
            model = transformers.AutoModel.from_config(config)
            model.save_pretrained(folder / name)
            params[name] = sum(p.numel() for p in model.parameters())
    _report(params=params)


def _build_minilm(folder: Path, config: dict, tokens: int) -> int:
    """A BERT folder with a whole-word WordPiece tokenizer, wrapped as a sentence-transformers
    folder (mean pooling, Normalize) at ``folder/minilm``; the BERT's parameter count."""
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base import modules
    from sentence_transformers.sentence_transformer.modules import Pooling
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    words = [f"w{i}" for i in range(config["vocab_size"] - len(SPECIAL))]
    vocab = {token: i for i, token in enumerate([*SPECIAL, *words])}
    text = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    text.normalizer = normalizers.BertNormalizer(lowercase=True)
    text.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    ends = [(name, vocab[name]) for name in ("[CLS]", "[SEP]")]
    text.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=ends
    )
    bert = folder / "bert"
    model = transformers.BertModel(transformers.BertConfig(**config))
    model.save_pretrained(bert)
    tokenizer = transformers.BertTokenizerFast(tokenizer_object=text, model_max_length=tokens)
    tokenizer.save_pretrained(bert)
    transformer = modules.Transformer(str(bert), max_seq_length=tokens)
    pipeline = [transformer, Pooling(config["hidden_size"], "mean"), modules.Normalize()]
    SentenceTransformer(modules=pipeline, device="cpu").save(str(folder / "minilm"))
    return sum(p.numel() for p in model.parameters())


def _js_workload(name: str, folder: Path, size: dict) -> tuple[tuple, Callable[[], object]]:
    """js's inputs' shape and its call (embeddings, or the last hidden state) for ``name``."""
    import jax
    import jax.numpy as jnp

    import js
    import js.models

    if name == "minilm":
        model = js.models.SentenceTransformer(folder / name)
        texts, batch = _texts(size), size["text"][0]
        shape = model.transformer.tokenizer(texts)["input_ids"].shape  # [N, tokens]
        return shape, lambda: model.encode(texts, batch_size=batch)
    model = js.models.from_pretrained(folder / name)
    forward = js.jit(lambda model, pixels: model(pixels))  # (last hidden state, pooled)
    pixels = _pixels(size)
    return pixels.shape, lambda: jax.block_until_ready(forward(model, jnp.asarray(pixels)))[0]


def _reference_workload(name: str, folder: Path, size: dict) -> tuple[tuple, Callable[[], object]]:
    """The reference's inputs' shape and its call under ``torch.inference_mode()``."""
    import torch
    import transformers

    if name == "minilm":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(folder / name), device="cpu")
        texts, batch = _texts(size), size["text"][0]
        shape = tuple(model.preprocess(texts)["input_ids"].shape)  # [N, tokens]
        run = lambda: model.encode(texts, batch_size=batch, show_progress_bar=False)  # noqa: E731
    else:
        model = transformers.AutoModel.from_pretrained(folder / name).eval()
        pixels = torch.from_numpy(_pixels(size))
        shape = tuple(pixels.shape)
        run = lambda: model(pixel_values=pixels).last_hidden_state.numpy()  # noqa: E731

    def call():
        with torch.inference_mode():
            return run()

    return shape, call


def _child_measure(kind: str, folder: Path, size: dict, only: list[str], repeats: int) -> None:
    """Each workload of ``only`` timed in js or the reference; its first output saved."""
    threads = None
    if kind == "reference":
        threads = _cores.match_torch()
        sys.modules["torchvision"] = None  # type: ignore[assignment]  # its wheel cannot import
    workload = _js_workload if kind == "js" else _reference_workload
    rows = {}
    for name in only:
        shape, call = workload(name, folder, size)
        first, out, seconds = _timed(call, repeats)
        np.save(folder / f"{kind}-{name}.npy", np.asarray(out))
        rows[name] = {"first_s": first, "s": seconds, "items": shape[0], "shape": list(shape)}
    _report(rows=rows, cores=len(_cores.available()), torch_threads=threads)


# --------------------------------------------------------------------------------- parent


def _child(kind: str, folder: Path, args: argparse.Namespace) -> dict:
    command = [sys.executable, "-m", MODULE, "--child", kind, "--folder", str(folder)]
    command += ["--only", *args.only, "--repeats", str(args.repeats)]
    command += ["--smoke"] if args.smoke else []
    done = subprocess.run(
        command, cwd=ROOT, env=_children.env(), capture_output=True, text=True, timeout=args.timeout
    )
    if done.returncode:
        raise RuntimeError(f"{kind} child failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return _children.result(done.stdout)


def _difference(folder: Path, name: str) -> float:
    """js's first output against the reference's: max |js - ref| / max |ref|."""
    ours, theirs = (np.load(folder / f"{who}-{name}.npy") for who in ("js", "reference"))
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def build(folder: Path, args: argparse.Namespace) -> dict:
    """Write the workloads' folders unless ``folder`` already holds them; their parameters."""
    missing = [name for name in args.only if not (folder / name).is_dir()]
    if not missing:
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    return _child("build", folder, argparse.Namespace(**{**vars(args), "only": missing}))


def measure(folder: Path, args: argparse.Namespace) -> list[dict]:
    """Per round, a js process and a reference process (alternating order) and js's
    differences from the reference's outputs."""
    rounds = []
    for round_ in range(args.rounds):
        run = {}
        for kind in ("js", "reference") if round_ % 2 == 0 else ("reference", "js"):
            run[kind] = _child(kind, folder, args)
            print(f"round {round_ + 1}/{args.rounds}: {kind} done", file=sys.stderr, flush=True)
        run["difference"] = {name: _difference(folder, name) for name in args.only}
        rounds.append(run)
    return rounds


def summary(rounds: list[dict], only: list[str]) -> list[dict]:
    """Per workload: medians over the rounds of items/s, first-call seconds, the per-round
    js/reference ratio, and the largest difference."""
    rows = []
    for name in only:
        js = [run["js"]["rows"][name] for run in rounds]
        ref = [run["reference"]["rows"][name] for run in rounds]
        rows.append(
            {
                "workload": name,
                "shape": js[0]["shape"],
                "js_per_s": statistics.median(r["items"] / r["s"] for r in js),
                "reference_per_s": statistics.median(r["items"] / r["s"] for r in ref),
                "ratio": statistics.median(b["s"] / a["s"] for a, b in zip(js, ref, strict=True)),
                "js_first_s": statistics.median(r["first_s"] for r in js),
                "reference_first_s": statistics.median(r["first_s"] for r in ref),
                "difference": max(run["difference"][name] for run in rounds),
            }
        )
    return rows


def problems(rounds: list[dict], size: dict) -> list[str]:
    """What makes a round's figures not comparable: other inputs on the two sides, sentences
    not of exactly the asked token count, outputs more than 1e-3 apart."""
    found = []
    for i, run in enumerate(rounds, 1):
        for name, difference in run["difference"].items():
            ours, theirs = run["js"]["rows"][name]["shape"], run["reference"]["rows"][name]["shape"]
            asked = (size["text"][2], size["text"][1]) if name == "minilm" else None
            if ours != theirs or (asked and tuple(ours) != asked):
                found.append(f"round {i}, {name}: inputs {ours} (js) and {theirs}, asked {asked}")
            if difference > 1e-3:
                found.append(f"round {i}, {name}: js differs from the reference by {difference}")
    return found


def table(rows: list[dict], rounds: list[dict]) -> str:
    first = rounds[0]
    lines = [
        f"{len(rounds)} rounds, {first['js']['cores']} cores, torch threads "
        f"{first['reference']['torch_threads']}",
        "",
        "| workload | input | reference | js items/s | reference items/s | js / reference "
        "| first call js / reference s | max difference |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['workload']} | {'x'.join(map(str, row['shape']))} | "
            f"{REFERENCE[row['workload']]} | {row['js_per_s']:.1f} | "
            f"{row['reference_per_s']:.1f} | {row['ratio']:.2f}x | {row['js_first_s']:.2f} / "
            f"{row['reference_first_s']:.2f} | {row['difference']:.1e} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="the models' folder (written when absent)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds (2)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per child (3)")
    parser.add_argument("--only", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--smoke", action="store_true", help="tiny models and batches")
    parser.add_argument("--cores", type=int, help="pin to the first N cores (children inherit)")
    parser.add_argument("--json", type=Path, help="also write every measurement to this file")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per process (600)")
    parser.add_argument("--child", choices=("build", "js", "reference"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        raise SystemExit(f"--rounds {args.rounds} --repeats {args.repeats}: give at least 1")
    size = _size(args.smoke)
    if args.child == "build":
        _child_build(args.folder, size, args.only)
    elif args.child in ("js", "reference"):
        _child_measure(args.child, args.folder, size, args.only, args.repeats)
    else:
        return _parent(args)
    return 0


def _parent(args: argparse.Namespace) -> int:
    cores = _cores.pin(["--cores", str(args.cores)] if args.cores else [])
    with tempfile.TemporaryDirectory(prefix="js-encoders-") as scratch:
        folder = args.folder or Path(scratch)
        built = build(folder, args)
        rounds = measure(folder, args)
    rows, found = summary(rounds, args.only), problems(rounds, _size(args.smoke))
    print(table(rows, rounds) + "\n", flush=True)
    for problem in found:
        print(f"NOT COMPARABLE: {problem}", flush=True)
    if args.json:
        report = {"cores": cores, "smoke": args.smoke, "built": built, "rounds": rounds}
        args.json.write_text(json.dumps({**report, "summary": rows, "problems": found}, indent=1))
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
