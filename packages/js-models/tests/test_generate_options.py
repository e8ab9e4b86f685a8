"""generate's options against transformers' generate on left-padded batches: the logits
processors (repetition penalty, no repeated n-gram, minimum new tokens, several end tokens), the
folder's generation_config.json, and beam search (sequences and sequences_scores)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from gpt2_support import transformers
from test_generate import pair, prompts

import js
from js.models import _generation, generate

SMALL = dict(hidden_size=32, intermediate_size=64)  # Llama; GPT-2 takes n_embd


def reference(model, ids, mask, **options):
    """transformers' generate (greedy or beam), its ``sequences`` and (beams) scores."""
    with torch.inference_mode():
        out = model.generate(
            torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            do_sample=False,
            return_dict_in_generate=True,
            output_scores=options.get("num_beams", 1) > 1,
            **options,
        )
    scores = getattr(out, "sequences_scores", None)
    return out.sequences.numpy(), None if scores is None else scores.numpy()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("llama")


@pytest.fixture(scope="module")
def llama(folder):
    return pair("llama", folder, **SMALL)  # saved in folder / "llama"


@pytest.fixture(scope="module")
def ends(llama):
    """Two end tokens that rows reach within a few greedy steps (so rows end early)."""
    hf, _ = llama
    ids, mask = prompts()
    free = reference(hf, ids, mask, max_new_tokens=8, eos_token_id=[], pad_token_id=0)[0][:, 6:]
    return [int(free[1, 3]), int(free[2, 5])]


@pytest.mark.parametrize(
    "options",
    [
        dict(repetition_penalty=1.8),
        dict(repetition_penalty=0.6, no_repeat_ngram_size=2),
        dict(min_new_tokens=6),
    ],
    ids=["repetition", "reward-and-ngram", "min-new"],
)
def test_processors_equal_transformers_greedy(llama, ends, options):
    hf, model = llama
    ids, mask = prompts()
    options = dict(max_new_tokens=12, eos_token_id=ends, pad_token_id=0, **options)
    expected = reference(hf, ids, mask, **options)[0]
    out = np.asarray(generate(model, ids, attention_mask=mask, **options))
    np.testing.assert_array_equal(out, expected)
    plain = np.asarray(
        generate(model, ids, attention_mask=mask, max_new_tokens=12, eos_token_id=ends)
    )
    assert not np.array_equal(out, plain)  # the option changed the tokens: a real test


def test_the_folders_generation_config_gives_the_defaults(llama, ends, folder, tmp_path):
    hf, _ = llama
    ids, mask = prompts()
    settings = dict(max_new_tokens=7, no_repeat_ngram_size=1, eos_token_id=ends, pad_token_id=0)
    shutil.copytree(folder / "llama", tmp_path / "folder")
    (tmp_path / "folder" / "generation_config.json").write_text(json.dumps(settings))
    model = js.models.from_pretrained(tmp_path / "folder")
    assert model.generation_config == settings
    config = transformers().GenerationConfig.from_pretrained(tmp_path / "folder")
    with torch.inference_mode():
        expected = hf.generate(
            torch.tensor(ids), attention_mask=torch.tensor(mask), generation_config=config
        )
    np.testing.assert_array_equal(generate(model, ids, attention_mask=mask), expected.numpy())
    # an argument beats the folder's value
    three = generate(model, ids, attention_mask=mask, max_new_tokens=3, eos_token_id=[])
    assert three.shape == (3, 9)
    model.save_pretrained(tmp_path / "again")
    saved = json.loads((tmp_path / "again" / "generation_config.json").read_text())
    assert saved == settings
    assert js.models.from_pretrained(tmp_path / "again").generation_config == saved


@pytest.fixture(scope="module")
def beam_ends(llama):
    """An end token on a path beam search takes without it (so beams end early)."""
    hf, _ = llama
    ids, mask = prompts()
    options = dict(max_new_tokens=8, num_beams=4, eos_token_id=[], pad_token_id=1)
    free = reference(hf, ids, mask, **options)[0][:, 6:]
    return [int(free[2, 1])]


def beams_equal(hf, model, ids, mask, penalties, **options) -> list[np.ndarray]:
    """js's beam search (``model.generate``) equals transformers' for each length penalty:
    the sequences exactly, the scores within 1e-5; returns transformers' sequences."""
    found = []
    for length_penalty in penalties:
        settings = dict(options, length_penalty=length_penalty)
        sequences, scores = reference(hf, ids, mask, **settings)
        out = model.generate(ids, attention_mask=mask, return_dict_in_generate=True, **settings)
        np.testing.assert_array_equal(np.asarray(out.sequences), sequences)
        np.testing.assert_allclose(np.asarray(out.sequences_scores), scores, rtol=1e-5, atol=1e-5)
        found.append(sequences)
    return found


@pytest.mark.parametrize(
    "beams, early_stopping, returned",
    [(2, False, 1), (4, True, 2), pytest.param(4, "never", 2, marks=pytest.mark.slow)],
)
def test_beam_search_equals_transformers(llama, beam_ends, beams, early_stopping, returned):
    hf, model = llama
    ids, mask = prompts()
    before = _generation.TRACES["beam"]
    sequences = beams_equal(  # length_penalty is traced: one program for the three
        hf,
        model,
        ids,
        mask,
        (1.0, 0.5, 2.0),
        max_new_tokens=10,
        num_beams=beams,
        early_stopping=early_stopping,
        num_return_sequences=returned,
        eos_token_id=beam_ends,
        pad_token_id=0,
    )
    # some returned beams end early: a real test of the finished beams
    assert any(np.isin(s[:, 6:], beam_ends).any() for s in sequences)
    assert _generation.TRACES["beam"] == before + 1


def test_forced_tokens_equal_transformers(llama):
    hf, model = llama
    ids, mask = prompts()
    options = dict(max_new_tokens=6, eos_token_id=[], pad_token_id=1, forced_eos_token_id=[3, 4])
    expected = reference(hf, ids, mask, **options)[0]
    np.testing.assert_array_equal(generate(model, ids, attention_mask=mask, **options), expected)
    assert np.isin(expected[:, -1], [3, 4]).all()
    # the forced first token follows a prompt of one token (transformers' cur_len == 1)
    one, real = ids[:, -1:], mask[:, -1:]
    options = dict(options, forced_bos_token_id=5, forced_eos_token_id=3)
    expected = reference(hf, one, real, **options)[0]
    np.testing.assert_array_equal(generate(model, one, attention_mask=real, **options), expected)
    assert (expected[:, 1] == 5).all() and (expected[:, -1] == 3).all()
    beams = beams_equal(hf, model, one, real, (1.0,), num_beams=2, **options)[0]
    assert (beams[:, 1] == 5).all() and (beams[:, -1] == 3).all()


def test_changing_the_penalties_compiles_nothing(llama):
    _, model = llama
    ids, mask = prompts()
    options = dict(attention_mask=mask, max_new_tokens=5, eos_token_id=[], no_repeat_ngram_size=3)
    generate(model, ids, repetition_penalty=1.2, min_new_tokens=2, forced_eos_token_id=3, **options)
    traces = dict(_generation.TRACES)
    generate(model, ids, repetition_penalty=1.7, min_new_tokens=4, forced_eos_token_id=7, **options)
    generate(model, ids, repetition_penalty=0.9, min_new_tokens=1, suppress_tokens=[5], **options)
    assert dict(_generation.TRACES) == traces


def test_bad_options_are_refused(llama):
    _, model = llama
    ids, mask = prompts()
    cases = [
        (dict(num_beams=2, num_return_sequences=3), ValueError, "needs num_beams >= 3"),
        (dict(num_return_sequences=2), ValueError, "needs num_beams >= 2"),
        (dict(num_beams=2, do_sample=True), NotImplementedError, "beam sampling"),
        (dict(early_stopping="soon", num_beams=2), ValueError, "early_stopping must be"),
        (dict(forced_eos_token_id=10**6), ValueError, "forced_eos_token_id must be ids in"),
        (dict(suppress_tokens="a"), TypeError, "suppress_tokens must be an int or a list"),
        (dict(repetition_penalty=0.0), ValueError, "repetition_penalty must be"),
        (dict(no_repeat_ngram_size=-1), ValueError, "no_repeat_ngram_size must be"),
    ]
    for options, error, message in cases:
        with pytest.raises(error, match=message):
            generate(model, ids, attention_mask=mask, max_new_tokens=3, **options)
    with pytest.raises(ValueError, match="beam search"):
        js.models.stream(model, ids, max_new_tokens=3, num_beams=2)


def characters():
    """transformers' fast tokenizer over one printable character per id (no merges)."""
    import string

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(string.printable[:96])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="0"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return transformers().PreTrainedTokenizerFast(tokenizer_object=backend)


def test_stop_strings_end_rows_as_transformers(llama):
    hf, model = llama
    ids, mask = prompts()
    tokenizer = characters()
    free = reference(hf, ids, mask, max_new_tokens=12, eos_token_id=[], pad_token_id=0)[0][:, 6:]
    stop = [tokenizer.decode(free[1, 2:4]), tokenizer.decode(free[0, 6:7])]  # rows 1 and 0 stop
    options = dict(max_new_tokens=12, eos_token_id=[], pad_token_id=0, stop_strings=stop)
    expected = reference(hf, ids, mask, tokenizer=tokenizer, **options)[0]
    out = generate(model, ids, attention_mask=mask, tokenizer=tokenizer, **options)
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert (expected[1, 10:] == 0).all()
