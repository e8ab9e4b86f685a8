"""BART against transformers 5.23: tiny random ``BartForConditionalGeneration`` models (every
1-D weight and ``final_logits_bias`` perturbed; the tied head with ``scale_embedding``, and an
untied one) on a padded source batch; the encoder's output and the decoder's logits both ways
within 1e-4, and greedy ``generate`` token for token."""

from __future__ import annotations

import json

import numpy as np
import pytest
from family_support import NEW, VOCAB, perturb, relative_error
from test_generate_options import beams_equal, reference

import js.models
from js.models._generation import generation_config
from js.models.bart import BartForConditionalGeneration, BartModel

TINY = {
    "vocab_size": VOCAB,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": 64,
    "forced_eos_token_id": 2,  # as BART's folders: the last new token is </s>
}
CASES = {  # the tied head's tiny greedy search repeats one token; the untied one's varies
    "tied": {"scale_embedding": True, "init_std": 0.3},
    "untied": {"tie_word_embeddings": False, "init_std": 0.08},
}
# A source batch padded on the right and on the left, and padded decoder tokens.
SOURCE_MASK = np.array([[1] * 7, [1] * 5 + [0] * 2, [0] * 3 + [1] * 4])
SOURCE = np.where(SOURCE_MASK == 1, np.random.default_rng(0).integers(3, VOCAB, (3, 7)), 1)
TARGET_MASK = np.array([[1] * 5, [1] * 5, [1] * 3 + [0] * 2])
TARGET = np.random.default_rng(1).integers(3, VOCAB, (3, 5))


@pytest.fixture(scope="module", params=list(CASES))
def bart(request, transformers, tmp_path_factory):
    """``(transformers model, its folder)``."""
    import torch

    torch.manual_seed(0)
    config = transformers.BartConfig(**TINY, **CASES[request.param])
    model = transformers.BartForConditionalGeneration(config).eval()
    perturb(model)
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.1)
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    return model, folder


def _outputs(model) -> tuple[np.ndarray, np.ndarray]:
    """js's or transformers' (encoder output, decoder logits) on the batch."""
    arrays = {
        "input_ids": SOURCE,
        "attention_mask": SOURCE_MASK,
        "decoder_input_ids": TARGET,
        "decoder_attention_mask": TARGET_MASK,
    }
    if isinstance(model, BartForConditionalGeneration):
        return np.asarray(model.encode(SOURCE, SOURCE_MASK)), np.asarray(model(**arrays))
    import torch

    with torch.no_grad():
        out = model(**{key: torch.tensor(value) for key, value in arrays.items()})
    return out.encoder_last_hidden_state.numpy(), out.logits.numpy()


def test_bart_loads_both_ways(bart, transformers, tmp_path):
    reference, folder = bart
    model = js.models.from_pretrained(folder)
    assert type(model) is BartForConditionalGeneration
    ours, theirs = _outputs(model), _outputs(reference)
    errors = {
        "encoder": relative_error(ours[0], theirs[0]),
        "logits": relative_error(*ours[1:], *theirs[1:]),
    }
    model.save_pretrained(tmp_path)
    back = transformers.BartForConditionalGeneration.from_pretrained(tmp_path).eval()
    errors["transformers from js"] = max(map(relative_error, _outputs(back), ours))
    print(folder.name, errors)
    assert max(errors.values()) < 1e-4
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == ["BartForConditionalGeneration"]
    # the base model from the same folder; decoder_input_ids None: the source shifted right
    base = BartModel.from_pretrained(folder)
    import torch

    with torch.no_grad():
        expected = reference.model(torch.tensor(SOURCE), torch.tensor(SOURCE_MASK))
    hidden, encoded = base(SOURCE, SOURCE_MASK)
    assert relative_error(encoded, theirs[0]) < 1e-4
    assert relative_error(hidden, expected.last_hidden_state.numpy()) < 1e-4


@pytest.mark.parametrize("bart", ["untied"], indirect=True)
def test_bart_generates_as_transformers(bart):
    import torch

    reference, folder = bart
    reference.generation_config.eos_token_id = None  # neither side stops early
    with torch.inference_mode():
        expected = reference.generate(
            torch.tensor(SOURCE),
            attention_mask=torch.tensor(SOURCE_MASK),
            max_new_tokens=NEW,
            do_sample=False,
            num_beams=1,
        ).numpy()
    model = js.models.from_pretrained(folder)
    got = model.generate(SOURCE, attention_mask=SOURCE_MASK, max_new_tokens=NEW, eos_token_id=[])
    np.testing.assert_array_equal(np.asarray(got), expected)
    assert expected.shape == (3, 1 + NEW) and (expected[:, 0] == 2).all()
    assert min(len(set(row)) for row in expected.tolist()) >= 8  # not one token repeated
    assert (expected[0] != expected[1]).any()  # the source matters
    print("greedy tokens match", expected[:, :8].tolist())


@pytest.mark.parametrize("bart", ["untied"], indirect=True)
def test_bart_forces_tokens_as_transformers(bart):
    """The folder's forced ``</s>`` last (``test_bart_generates_as_transformers`` runs with it
    alone) and a forced ``<s>`` first through an assigned generation config (greedy; the beams
    below, in the full run)."""
    hf, folder = bart
    model = js.models.from_pretrained(folder)
    assert generation_config(model)["forced_eos_token_id"] == 2  # as transformers saved it
    options = dict(max_new_tokens=8, eos_token_id=2)
    # bart-large-cnn forces <s> first; the assigned config is generate's default
    model.generation_config = {**model.generation_config, "forced_bos_token_id": 0}
    expected = reference(hf, SOURCE, SOURCE_MASK, **options, forced_bos_token_id=0)[0]
    got = model.generate(SOURCE, attention_mask=SOURCE_MASK, **options)
    np.testing.assert_array_equal(np.asarray(got), expected)
    assert (expected[:, 1] == 0).all() and (expected[:, -1] == 2).all()


@pytest.mark.slow  # the shared beam program is in the default run through T5's test
@pytest.mark.parametrize(
    "beams, early_stopping, returned, penalties",
    [(2, False, 1, (1.0,)), (4, True, 2, (0.5, 2.0)), (4, False, 2, (1.0,))],
)
@pytest.mark.parametrize("bart", ["untied"], indirect=True)
def test_bart_beams_with_forced_tokens_as_transformers(
    bart, beams, early_stopping, returned, penalties
):
    hf, folder = bart
    model = js.models.from_pretrained(folder)
    options = dict(max_new_tokens=8, eos_token_id=2)
    for forced in ({}, {"forced_bos_token_id": 0}):  # bart-large-cnn forces <s> first
        sequences = beams_equal(
            hf,
            model,
            SOURCE,
            SOURCE_MASK,
            penalties,
            num_beams=beams,
            early_stopping=early_stopping,
            num_return_sequences=returned,
            **options,
            **forced,
        )
        assert all((s[:, 1:] == 2).any(axis=1).all() for s in sequences)  # each beam ends
    assert (sequences[0][:, 1] == 0).all()  # forced first
