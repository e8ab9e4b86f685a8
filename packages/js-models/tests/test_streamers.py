"""js.models.TextStreamer and TextIteratorStreamer given as ``streamer=`` to
js.models.pipeline("text-generation"), against transformers' streamers on transformers' pipeline
over the same tiny GPT-2 folder: the printed text and the pieces equal, greedy."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from test_pipelines import CHATML, _byte_bpe, _save, transformers

import js.models

torch = pytest.importorskip("torch")
GREEDY = {"max_new_tokens": 12, "do_sample": False}
# Prompts of 17 to 32 tokens, one padded shape: one compiled program for the whole file.
PROMPT = "hello world, how are you today? john lives in"
CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def pipes(tmp_path_factory):
    """(js's, transformers') text-generation pipelines on one GPT-2 folder."""
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=_byte_bpe(), eos_token="<|endoftext|>", chat_template=CHATML
    )
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=128,
        bos_token_id=0, eos_token_id=0, initializer_range=0.3,
    )  # fmt: skip
    folder = _save(tmp_path_factory.mktemp("gpt2"), transformers.GPT2LMHeadModel(config), tokenizer)
    ours = js.models.pipeline("text-generation", folder)
    return ours, transformers.pipeline("text-generation", model=str(folder))


@pytest.mark.parametrize("end", [False, True])
def test_text_streamer_prints_as_transformers(pipes, capsys, end):
    ours, theirs = pipes
    options = dict(GREEDY)
    if end:  # one of the tokens greedy search picks ends the stream early
        new = ours(PROMPT, return_full_text=False, **GREEDY)[0]["generated_text"]
        options["eos_token_id"] = ours.tokenizer.encode(new, add_special_tokens=False)[3]
    result = ours(PROMPT, streamer=js.models.TextStreamer(ours.tokenizer), **options)
    printed = capsys.readouterr().out
    expected = theirs(PROMPT, streamer=transformers.TextStreamer(theirs.tokenizer), **options)
    assert printed == capsys.readouterr().out
    assert result == expected
    assert printed == result[0]["generated_text"] + "\n"  # the prompt, the reply, a newline


def _pieces(pipe, streamer_class, prompt, **options):
    """The text pieces a TextIteratorStreamer yields while ``pipe`` runs in a thread, and the
    pipeline's result."""
    streamer = streamer_class(pipe.tokenizer, skip_prompt=True, skip_special_tokens=True)
    result = []
    thread = threading.Thread(
        target=lambda: result.append(pipe(prompt, streamer=streamer, **options))
    )
    thread.start()
    pieces = list(streamer)
    thread.join()
    return pieces, result[0]


@pytest.mark.parametrize("prompt", [PROMPT, CHAT])
def test_iterator_streamer_pieces_equal_transformers(pipes, prompt):
    ours, theirs = pipes
    options = {**GREEDY, "return_full_text": False}
    pieces, result = _pieces(ours, js.models.TextIteratorStreamer, prompt, **options)
    expected = _pieces(theirs, transformers.TextIteratorStreamer, prompt, **options)
    assert (pieces, result) == expected
    assert "".join(pieces) == result[0]["generated_text"]
    assert len(pieces) > 1  # shown as it came


def test_streamer_word_boundaries_and_errors(pipes, capsys):
    ours = pipes[0]
    tokenizer = ours.tokenizer
    ids = tokenizer.encode("hello world, how are\nyou today")
    streamer = js.models.TextIteratorStreamer(tokenizer)
    for token in ids:
        streamer.put(np.array([token]))
    streamer.end()
    pieces = list(streamer)
    assert "".join(pieces) == "hello world, how are\nyou today"
    assert all(p.endswith((" ", "\n")) for p in pieces[:-1] if p)  # never half a word
    streamer = js.models.TextStreamer(tokenizer)
    with pytest.raises(ValueError, match="token ids of 2 rows; a streamer shows one sequence"):
        streamer.put(np.zeros((2, 3), np.int32))
    with pytest.raises(ValueError, match="a streamer shows one sequence, and 2 prompts"):
        ours(["hello", "world"], streamer=streamer, **GREEDY)
    with pytest.raises(ValueError, match=r"beam search \(num_beams > 1\)"):
        ours("hello", streamer=streamer, num_beams=2, **GREEDY)
    assert capsys.readouterr().out == ""  # refused before anything was shown
