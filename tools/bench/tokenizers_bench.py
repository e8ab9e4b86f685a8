"""Tokenizer throughput: ``js.models.Tokenizer`` against transformers' fast tokenizer
(``AutoTokenizer``) on the same folder (issue 36).

Usage, from the repository root, with the models environment's Python (js-models, tokenizers,
jinja2 and transformers installed: ``hatch run models:python -m tools.bench.tokenizers_bench``)::

    python -m tools.bench.tokenizers_bench                     # 3 rounds, a trained folder
    python -m tools.bench.tokenizers_bench --cores 2 --json tokenizers.json
    python -m tools.bench.tokenizers_bench --folder ~/models/Qwen2.5-0.5B-Instruct
    python -m tools.bench.tokenizers_bench --smoke --rounds 1  # 20 texts, a 300-token vocabulary

The folder: ``--folder DIR`` (a hub folder with ``tokenizer.json``), else a byte-level BPE
(GPT-2/Qwen style, 8000 tokens, a ChatML template) trained here with the ``tokenizers`` library
on the generated sentences and saved by transformers' ``save_pretrained``. The texts: 1000
mixed-length sentences (4 to 120 words from a fixed word list, seeded). Workloads, each a call
timed ``--repeats`` times (median), rounds alternating which library goes first:

- ``encode``: ``tokenizer(texts, padding=True, return_tensors="np")`` (ids and mask arrays);
- ``decode``: ``batch_decode(ids, skip_special_tokens=True)`` of the encoded rows;
- ``chat``: ``apply_chat_template(chat, add_generation_prompt=True, tokenize=False)`` for each
  text as a one-turn chat (needs a chat template; skipped without one).

Both libraries run the same Rust backend, so the ratio measures js's Python around it. Items:
texts per second. ``--cores N`` pins the process and sets ``RAYON_NUM_THREADS`` (the backend's
batch threads) to N before either library starts. Prints a markdown table (medians over rounds;
the ratio is the median of each round's ratio); ``--json PATH`` also writes every measurement.
Outputs are checked equal (ids, decoded text, rendered chats) before anything is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tools.bench import _cores

WORKLOADS = ("encode", "decode", "chat")
WORDS = (
    "the quick brown fox jumps over lazy dog hello world model token text sentence batch "
    "Paris weather today tomorrow café naïve 日本 emoji 😀 don't it's we're numbers 42 3.14 "
    "attention transformer layer weight gradient loss learning rate, . ! ?"
).split()
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def texts(count: int, seed: int = 0) -> list[str]:
    """``count`` sentences of 4 to 120 words."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(4, 120))) for _ in range(count)]


def build(folder: Path, vocab: int) -> None:
    """A byte-level BPE trained on generated sentences, saved by transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=specials, initial_alphabet=alphabet, show_progress=False
    )
    backend.train_from_iterator(texts(2000, seed=1), trainer)
    PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=CHATML,
    ).save_pretrained(folder)  # fmt: skip


def _timed(call: Callable[[], object], repeats: int) -> float:
    """The median seconds of ``repeats`` calls, after one untimed call."""
    call()
    seconds = []
    for _ in range(repeats):
        begin = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - begin)
    return statistics.median(seconds)


def workloads(tokenizer, rows: list[str], ids: np.ndarray) -> dict[str, Callable[[], object]]:
    """Each workload's call on one library's tokenizer (both have transformers' methods)."""
    chats = [[{"role": "user", "content": text}] for text in rows]
    calls = {
        "encode": lambda: tokenizer(rows, padding=True, return_tensors="np"),
        "decode": lambda: tokenizer.batch_decode(ids, skip_special_tokens=True),
    }
    if tokenizer.chat_template is not None:
        calls["chat"] = lambda: [
            tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False)
            for c in chats
        ]
    return calls


def check(ours: dict, theirs: dict) -> list[str]:
    """The workloads whose outputs differ between the libraries."""
    found = []
    for name in ours:
        a, b = ours[name](), theirs[name]()
        if name == "encode":
            same = all(
                np.array_equal(a[k], np.asarray(b[k])) for k in ("input_ids", "attention_mask")
            )
        else:
            same = a == b
        if not same:
            found.append(f"{name}: js's output differs from transformers'")
    return found


def measure(folder: Path, args: argparse.Namespace) -> dict:
    from transformers import AutoTokenizer

    from js.models import Tokenizer

    rows = texts(args.texts)
    libraries = {
        "js": Tokenizer.from_pretrained(folder),
        "transformers": AutoTokenizer.from_pretrained(folder),
    }
    ids = libraries["js"](rows, padding=True)["input_ids"]
    calls = {name: workloads(t, rows, ids) for name, t in libraries.items()}
    only = [w for w in args.only if w in calls["js"]]
    problems = check({w: calls["js"][w] for w in only}, {w: calls["transformers"][w] for w in only})
    rounds = []
    for r in range(args.rounds):
        order = ["js", "transformers"] if r % 2 == 0 else ["transformers", "js"]
        rounds.append(
            {
                lib: {w: len(rows) / _timed(calls[lib][w], args.repeats) for w in only}
                for lib in order
            }
        )
    summary = []
    for w in only:
        ratios = [run["js"][w] / run["transformers"][w] for run in rounds]
        summary.append({
            "workload": w,
            "js_per_s": statistics.median(run["js"][w] for run in rounds),
            "transformers_per_s": statistics.median(run["transformers"][w] for run in rounds),
            "ratio": statistics.median(ratios),
        })  # fmt: skip
    tokens = int(ids.shape[0] * ids.shape[1])
    return {"texts": len(rows), "padded_shape": list(ids.shape), "tokens": tokens,
            "vocab": len(libraries["js"]), "rounds": rounds, "summary": summary,
            "problems": problems}  # fmt: skip


def table(report: dict) -> str:
    lines = [
        f"{report['texts']} texts, padded {report['padded_shape']}, vocabulary {report['vocab']}, "
        f"{len(report['rounds'])} rounds, {len(report['cores'])} cores",
        "",
        "| workload | js texts/s | transformers texts/s | js / transformers |",
        "|---|---:|---:|---:|",
    ]
    for row in report["summary"]:
        lines.append(
            f"| {row['workload']} | {row['js_per_s']:.0f} | {row['transformers_per_s']:.0f} | "
            f"{row['ratio']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="a tokenizer folder (default: trained here)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per workload (5)")
    parser.add_argument("--only", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--smoke", action="store_true", help="20 texts, a 300-token vocabulary")
    parser.add_argument("--cores", type=int, help="pin to the first N cores")
    parser.add_argument("--json", type=Path, help="also write every measurement to this file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        raise SystemExit(f"--rounds {args.rounds} --repeats {args.repeats}: give at least 1")
    args.texts = 20 if args.smoke else 1000
    cores = _cores.pin(["--cores", str(args.cores)] if args.cores else [])
    os.environ.setdefault("RAYON_NUM_THREADS", str(len(cores)))  # before tokenizers starts
    with tempfile.TemporaryDirectory(prefix="js-tokenizers-") as scratch:
        folder = args.folder
        if folder is None:
            folder = Path(scratch)
            build(folder, 300 if args.smoke else 8000)
        report = {"cores": cores, "smoke": args.smoke, **measure(folder, args)}
    print(table(report) + "\n", flush=True)
    for problem in report["problems"]:
        print(f"NOT COMPARABLE: {problem}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
