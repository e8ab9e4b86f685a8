"""``python -m js.models``: info, generate, chat and embed on tiny folders written by js (a GPT-2
with a byte-level BPE tokenizer and a chat template, a BERT sentence-transformers folder with a
WordPiece tokenizer), each command's output equal to the same work done in-process. One
subprocess for ``generate`` (the slow tier runs ``info`` so too, and ``chat`` through a
pseudo-terminal, as a person at a terminal drives it); the rest calls ``main`` in-process."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import js
from js.models import (
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    SentenceTransformer,
    Tokenizer,
    generate,
)
from js.models._cli import main

pytest.importorskip("tokenizers")
from tokenizers import Tokenizer as Backend  # noqa: E402
from tokenizers import decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world, how are you today?"]
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    backend.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(vocab_size=300, special_tokens=specials, initial_alphabet=alphabet),
    )
    backend.save(str(folder / "tokenizer.json"))
    config = {"eos_token": "<|im_end|>", "chat_template": CHATML}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    gpt = GPT2Config(
        vocab_size=300, n_embd=32, n_layer=1, n_head=2, n_positions=128, eos_token_id=2
    )
    GPT2LMHeadModel(gpt, rngs=js.Rngs(params=0)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    folder = tmp_path_factory.mktemp("st")
    backend = Backend(models.WordPiece(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    backend.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=80, special_tokens=specials)
    )
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"pad_token": "[PAD]"}))
    bert = BertConfig(vocab_size=80, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=32)  # fmt: skip
    BertModel(bert, rngs=js.Rngs(params=0)).save_pretrained(folder)
    (folder / "1_Pooling").mkdir()
    pooling = {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    return folder


def _run(*args, stdin=None):
    done = subprocess.run(
        [sys.executable, "-m", "js.models", *map(str, args)],
        capture_output=True, text=True, input=stdin, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _greedy(folder, ids, n):
    model, tokenizer = GPT2LMHeadModel.from_pretrained(folder), Tokenizer.from_pretrained(folder)
    out = generate(model, jnp.asarray([ids]), max_new_tokens=n)
    return tokenizer.decode(np.asarray(out)[0, len(ids) :], skip_special_tokens=True)


@pytest.mark.process
def test_generate_streams_the_greedy_text(gpt2):
    tokenizer = Tokenizer.from_pretrained(gpt2)
    out = _run("generate", gpt2, "hello world", "--max-new-tokens", 9)
    assert out == _greedy(gpt2, tokenizer.encode("hello world"), 9) + "\n"


def test_embed_writes_the_embeddings(sentences, tmp_path):  # in-process: one subprocess test
    lines = ["the quick fox", "", "hello world, how are you?", "dog"]
    (tmp_path / "in.txt").write_text("\n".join(lines))
    args = ["embed", str(sentences), "--input", str(tmp_path / "in.txt")]
    assert main([*args, "--output", str(tmp_path / "out.npy")]) == 0
    expected = SentenceTransformer(sentences).encode([line for line in lines if line])
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, atol=1e-6)


@pytest.mark.process
@pytest.mark.slow
def test_info_in_a_subprocess(gpt2):
    assert "class: GPT2LMHeadModel" in _run("info", gpt2)


def test_info_chat_and_errors(gpt2, sentences, tmp_path, capsys, monkeypatch):
    assert main(["info", str(sentences)]) == 0
    out = capsys.readouterr().out
    assert "family: js.models.bert (transformers 'bert')" in out
    assert "class: BertModel" in out and "sentence-transformers: yes" in out
    count = sum(p.size for p in BertModel.from_pretrained(sentences).state_dict().values())
    assert f"parameters: {count:,} in " in out and "F32" in out
    tokenizer = Tokenizer.from_pretrained(gpt2)
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("hi\nhow are you?\n"))
    assert main(["chat", str(gpt2), "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    chat = [{"role": "user", "content": "hi"}]
    first = _greedy(
        gpt2, tokenizer.apply_chat_template(chat, add_generation_prompt=True)["input_ids"], 4
    )
    chat += [{"role": "assistant", "content": first}, {"role": "user", "content": "how are you?"}]
    ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True)["input_ids"]
    assert out == f"{first}\n{_greedy(gpt2, ids, 4)}\n"  # the second reply saw the first
    for args, match in [
        (["info", str(tmp_path / "nothing")], "does not exist"),
        (["info", str(tmp_path)], "has no config.json"),
        (["embed", str(gpt2), "--input", str(tmp_path / "x"), "--output", "y"], "No such file"),
    ]:
        assert main(args) == 2
        assert match in capsys.readouterr().err
    (tmp_path / "in.txt").write_text("a line")
    assert main(["embed", str(gpt2), "--input", str(tmp_path / "in.txt"), "--output", "y"]) == 2
    assert "modules.json" in capsys.readouterr().err


def _read_until(fd, end, timeout=60):
    """The terminal's output up to and including ``end`` (bytes), ``\r\n`` read as ``\n``."""
    out = b""
    while not out.endswith(end):
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, f"no {end!r} from the chat; it wrote {out!r}"
        out += os.read(fd, 4096)
    return out.replace(b"\r\n", b"\n").decode()


@pytest.mark.process
@pytest.mark.slow
def test_chat_through_a_terminal(gpt2):
    """``chat`` on a pseudo-terminal: a ``> `` prompt before each turn, the typed line echoed by
    the terminal, each reply streamed (greedy, the in-process chat's) with the history kept,
    and Ctrl-D (EOF) ends it with exit status 0."""
    master, slave = os.openpty()
    command = [sys.executable, "-m", "js.models", "chat", str(gpt2), "--max-new-tokens", "5"]
    env = {**os.environ, "TERM": "dumb"}  # readline's plain line editing: no escape sequences
    process = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=subprocess.PIPE, close_fds=True, env=env
    )
    os.close(slave)
    try:
        assert _read_until(master, b"> ") == "> "
        tokenizer, chat, shown = Tokenizer.from_pretrained(gpt2), [], []
        for line in ("hi", "how are you?"):
            os.write(master, line.encode() + b"\n")
            chat.append({"role": "user", "content": line})
            ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True)["input_ids"]
            chat.append({"role": "assistant", "content": _greedy(gpt2, ids, 5)})
            shown.append(_read_until(master, b"> "))
            assert shown[-1] == f"{line}\n{chat[-1]['content']}\n> "  # echo, reply, prompt
        os.write(master, b"\x04")  # Ctrl-D at the start of a line: EOF
        assert process.wait(timeout=60) == 0
        assert "loaded GPT2LMHeadModel" in process.stderr.read().decode()
    finally:
        process.kill()
        process.wait()
        process.stderr.close()
        os.close(master)
