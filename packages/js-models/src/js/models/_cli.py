"""``python -m js.models COMMAND FOLDER ...``: a model folder used from the shell.

- ``info FOLDER``: the family, the class ``from_pretrained`` would build, the parameter count
  and dtypes (read from the safetensors headers, nothing loaded) and the tokenizer, image
  processor, generation and sentence-transformers files found;
- ``generate FOLDER PROMPT``: the continuation, printed as it comes (``js.models.stream``);
- ``chat FOLDER``: an interactive chat through the folder's chat template, each reply
  streamed, the history kept (one message a line on stdin; end with EOF);
- ``embed FOLDER --input sentences.txt --output embeddings.npy``: a sentence-transformers
  folder's embeddings of each line.

Errors (a missing or foreign folder, a bad option) are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

_DTYPES = ("float32", "bfloat16", "float16", "auto")


def _weights(folder: Path) -> dict[str, dict[str, Any]]:
    """``{name: {"dtype", "shape"}}`` of the folder's safetensors files (their headers)."""
    index = folder / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else []
    )
    tensors = {}
    for name in files or ["model.safetensors"]:
        if (folder / name).is_file():
            with open(folder / name, "rb") as handle:
                header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
            tensors.update({k: v for k, v in header.items() if k != "__metadata__"})
    return tensors


def info(args: argparse.Namespace) -> None:
    from ._folders import _class_of, _family, _folder, _read_config

    folder = _folder(args.folder)
    config = _read_config(folder)
    family, _, kind = _family(config, folder)
    cls = _class_of(config, folder)
    tensors = _weights(folder)
    count = sum(math.prod(t["shape"]) for t in tensors.values())
    kinds = sorted({t["dtype"] for t in tensors.values()})
    print(f"folder: {folder}")
    name = config.get("model_type") or config["architecture"]
    print(f"family: js.models.{family} ({kind} {name!r})")
    print(f"class: {cls.__name__} (js.models.from_pretrained builds it)")
    dtypes = ", ".join(kinds) or "no weights found"
    print(f"parameters: {count:,} in {len(tensors)} tensors, {dtypes}")
    files = {
        "tokenizer": "tokenizer.json",
        "chat template": "chat_template.jinja",
        "image processor": "preprocessor_config.json",
        "generation config": "generation_config.json",
        "sentence-transformers": "modules.json",
    }
    for what, file in files.items():
        found = (folder / file).is_file() or what == "chat template" and _has_template(folder)
        print(f"{what}: {'yes' if found else 'no'}")


def _has_template(folder: Path) -> bool:
    file = folder / "tokenizer_config.json"
    return file.is_file() and "chat_template" in json.loads(file.read_text())


def _load(folder: str, dtype: str) -> tuple[Any, Any]:
    """The folder's model and tokenizer, with progress on stderr."""
    import jax.numpy as jnp

    from ._pretrained import from_pretrained
    from .tokenizer import Tokenizer

    start = time.perf_counter()
    print(f"loading {folder} ...", file=sys.stderr, flush=True)
    model = from_pretrained(folder, dtype=dtype if dtype == "auto" else getattr(jnp, dtype))
    tokenizer = Tokenizer.from_pretrained(folder)
    print(f"loaded {type(model).__name__} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return model, tokenizer


def _reply(model: Any, tokenizer: Any, ids: Any, args: argparse.Namespace) -> Iterator[str]:
    """The new text, piece by piece, as ``js.models.stream`` gives the tokens."""
    import js
    from js.models import stream

    sample = args.temperature > 0
    options = {"temperature": args.temperature, "top_p": args.top_p} if sample else {}
    rngs = js.Rngs(sample=args.seed) if sample else None
    tokens: list[int] = []
    shown = ""
    ids = np.asarray(ids, np.int32)[None]
    for chunk in stream(
        model,
        ids,
        max_new_tokens=args.max_new_tokens,
        do_sample=sample,
        rngs=rngs,
        chunk=4,
        **options,
    ):
        tokens += chunk[0].tolist()
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        if not text.endswith("\ufffd"):  # wait for the rest of a split character
            yield text[len(shown) :]
            shown = text
    if len(shown) < len(text := tokenizer.decode(tokens, skip_special_tokens=True)):
        yield text[len(shown) :]


def _print(pieces: Iterator[str]) -> str:
    text = ""
    for piece in pieces:
        print(piece, end="", flush=True)
        text += piece
    print()
    return text


def generate(args: argparse.Namespace) -> None:
    model, tokenizer = _load(args.folder, args.dtype)
    _print(_reply(model, tokenizer, tokenizer.encode(args.prompt), args))


def chat(args: argparse.Namespace) -> None:
    model, tokenizer = _load(args.folder, args.dtype)
    if tokenizer.chat_template is None:
        raise ValueError(
            f"chat: {args.folder} has no chat template (tokenizer_config.json). Fix: use generate"
        )
    messages = [{"role": "system", "content": args.system}] if args.system else []
    ask = _prompter(sys.stdin.isatty())
    while True:
        line = ask()
        messages.append({"role": "user", "content": line})
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
        messages.append(
            {"role": "assistant", "content": _print(_reply(model, tokenizer, ids, args))}
        )


def _prompter(interactive: bool) -> Any:
    """Read one user line: on a terminal after a ``> `` prompt on stdout, with line editing and
    the typed lines' history (``readline``); from a pipe, plainly. (Without ``readline``,
    ``input`` would write its prompt to stderr, lost when stderr is redirected.)"""
    if not interactive:
        return input
    try:
        import readline  # noqa: F401  (input() edits lines with it and writes the prompt to stdout)
    except ImportError:
        return lambda: print("> ", end="", flush=True) or input()
    return lambda: input("> ")


def embed(args: argparse.Namespace) -> None:
    from .sentence_transformers import SentenceTransformer

    lines = [line for line in Path(args.input).read_text(encoding="utf-8").splitlines() if line]
    model = SentenceTransformer(args.folder)
    embeddings = model.encode(
        lines, batch_size=args.batch_size, normalize_embeddings=args.normalize
    )
    np.save(args.output, embeddings)
    print(f"{args.output}: {list(embeddings.shape)} float32", file=sys.stderr)


def _command(commands: Any, name: str, run: Any, help: str) -> argparse.ArgumentParser:
    command = commands.add_parser(name, help=help)
    command.set_defaults(run=run)
    command.add_argument("folder", help="a local model folder")
    return command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m js.models",
        description="Text, embeddings and facts from a local model folder",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _command(commands, "info", info, "what a folder holds and would load")
    texts = _command(commands, "generate", generate, "continue a prompt, streaming the text")
    texts.add_argument("prompt")
    talk = _command(commands, "chat", chat, "chat with the folder's template (stdin lines)")
    talk.add_argument("--system", help="a system message first")
    for command in (texts, talk):
        command.add_argument("--max-new-tokens", type=int, default=64)
        command.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
        command.add_argument("--top-p", type=float, default=1.0)
        command.add_argument("--seed", type=int, default=0)
        command.add_argument("--dtype", choices=_DTYPES, default="float32")
    command = _command(commands, "embed", embed, "sentence embeddings of a file's lines")
    command.add_argument("--input", required=True, help="a text file, one sentence a line")
    command.add_argument("--output", required=True, help="the .npy file to write")
    command.add_argument("--batch-size", type=int, default=32)
    command.add_argument("--normalize", action="store_true", help="unit-length embeddings")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        args.run(args)
    except (OSError, ValueError, KeyError, NotImplementedError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (EOFError, KeyboardInterrupt):
        print(file=sys.stderr)
    return 0
