"""T5 against transformers 5.23: tiny random models (1-D weights perturbed) of both feed-forward
kinds and both head scalings, on a padded source batch; the encoder's output and the decoder's
logits both ways within 1e-4, and greedy ``generate`` token for token."""

from __future__ import annotations

import json

import numpy as np
import pytest
from family_support import NEW, VOCAB, perturb, relative_error
from test_generate_options import beams_equal, reference

import js.models
from js.models import _generation
from js.models.t5 import T5Config, T5EncoderModel, T5ForConditionalGeneration, T5Model

SIZES = {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4}
CASES = {  # name -> config keys: v1.0 (ReLU, scaled tied head), Flan-T5 (gated GELU, unscaled)
    "t5-v1.0": {"feed_forward_proj": "relu"},
    "flan-t5": {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
}
# A source batch padded on the right (as T5's tokenizer pads) and decoder tokens.
SOURCE_MASK = np.array([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
SOURCE = np.where(SOURCE_MASK == 1, np.random.default_rng(0).integers(2, VOCAB, (3, 7)), 0)
TARGET = np.random.default_rng(1).integers(2, VOCAB, (3, 5))


@pytest.fixture(scope="module", params=list(CASES))
def case(request, transformers, tmp_path_factory):
    """``(name, transformers model, its folder)``."""
    import torch

    torch.manual_seed(0)
    keys = {"vocab_size": VOCAB, "decoder_start_token_id": 0, **SIZES, **CASES[request.param]}
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**keys)).eval()
    perturb(model)
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    return request.param, model, folder


def _torch(model, **arrays):
    import torch

    with torch.no_grad():
        return model(**{key: torch.tensor(value) for key, value in arrays.items()})


def _outputs(model) -> tuple[np.ndarray, np.ndarray]:
    """js's or transformers' (encoder output, decoder logits) on the batch."""
    if isinstance(model, js.models.t5.T5PreTrainedModel):
        encoded = model.encode(SOURCE, SOURCE_MASK)
        logits = model(SOURCE, SOURCE_MASK, TARGET, encoder_outputs=encoded)
        return np.asarray(encoded), np.asarray(logits)
    out = _torch(model, input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET)
    return out.encoder_last_hidden_state.numpy(), out.logits.numpy()


def test_loads_both_ways(case, transformers, tmp_path):
    name, reference, folder = case
    model = js.models.from_pretrained(folder)
    assert type(model) is T5ForConditionalGeneration
    ours, theirs = _outputs(model), _outputs(reference)
    there = max(map(relative_error, ours, theirs))
    model.save_pretrained(tmp_path)
    back = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path).eval()
    back_error = max(map(relative_error, _outputs(back), ours))
    print(name, {"js from transformers": there, "transformers from js": back_error})
    assert there < 1e-4 and back_error < 1e-4


@pytest.mark.parametrize(  # one loop for both: the second model in the full run only
    "case", ["t5-v1.0", pytest.param("flan-t5", marks=pytest.mark.slow)], indirect=True
)
def test_greedy_generate_matches_transformers(case):
    import torch

    _, reference, folder = case
    model = js.models.from_pretrained(folder)
    reference.generation_config.eos_token_id = None  # neither side stops early
    with torch.inference_mode():
        expected = reference.generate(
            torch.tensor(SOURCE),
            attention_mask=torch.tensor(SOURCE_MASK),
            max_new_tokens=NEW,
            do_sample=False,
        ).numpy()
    before = _generation.TRACES["encode"]
    got = model.generate(SOURCE, attention_mask=SOURCE_MASK, max_new_tokens=NEW, eos_token_id=[])
    np.testing.assert_array_equal(np.asarray(got), expected)
    assert expected.shape == (3, 1 + NEW)
    again = model.generate(SOURCE, attention_mask=SOURCE_MASK, max_new_tokens=NEW, eos_token_id=[])
    np.testing.assert_array_equal(np.asarray(again), expected)
    assert _generation.TRACES["encode"] - before <= 1  # the second call compiles nothing

    # A decoder prompt (forced tokens) and suppressed tokens, as Whisper's generation uses them
    forced = {
        "decoder_input_ids": np.array([[0, 5, 7]] * 3),
        "suppress_tokens": sorted({int(t) for t in expected[:, 2:8].ravel()})[:4],
        "begin_suppress_tokens": [int(expected[0, 1]), int(expected[1, 1])],
    }
    with torch.inference_mode():
        expected = reference.generate(
            torch.tensor(SOURCE),
            attention_mask=torch.tensor(SOURCE_MASK),
            max_new_tokens=NEW,
            do_sample=False,
            **{**forced, "decoder_input_ids": torch.tensor(forced["decoder_input_ids"])},
        ).numpy()
    got = model.generate(
        SOURCE, attention_mask=SOURCE_MASK, max_new_tokens=NEW, eos_token_id=[], **forced
    )
    np.testing.assert_array_equal(np.asarray(got), expected)
    assert not np.isin(expected[:, 3:], forced["suppress_tokens"]).any()


@pytest.mark.parametrize(
    "beams, early_stopping, returned",
    [
        (4, False, 2),
        pytest.param(2, True, 1, marks=pytest.mark.slow),
        pytest.param(4, "never", 2, marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("case", ["flan-t5"], indirect=True)
def test_beam_search_matches_transformers(case, beams, early_stopping, returned):
    _, hf, folder = case
    model = js.models.from_pretrained(folder)
    options = dict(max_new_tokens=8, num_beams=4, eos_token_id=[], pad_token_id=5)
    free = reference(hf, SOURCE, SOURCE_MASK, **options)
    ends = [int(free[0][0, 3]), int(free[0][2, 2])]  # tokens on the beams' paths: some end early
    before = _generation.TRACES["beam"]
    options = dict(num_beams=beams, early_stopping=early_stopping, num_return_sequences=returned)
    sequences = beams_equal(
        hf, model, SOURCE, SOURCE_MASK, (2.0, 0.5), max_new_tokens=8, eos_token_id=ends, **options
    )
    assert any(np.isin(s[:, 1:-1], ends).any() for s in sequences)  # some beams end early
    assert _generation.TRACES["beam"] == before + 1  # a new length_penalty compiles nothing


@pytest.mark.parametrize("case", ["flan-t5"], indirect=True)
def test_untied_head_as_on_the_hub(case, transformers, tmp_path):
    """Flan-T5's folders on the Hub: tie_word_embeddings false and an lm_head of its own
    (transformers then leaves the two unshared): read both ways with that head."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    _, _, folder = case
    untied = tmp_path / "untied"
    shutil.copytree(folder, untied)
    weights = load_file(untied / "model.safetensors")
    weights["lm_head.weight"] = torch.randn(
        weights["shared.weight"].shape, generator=torch.Generator().manual_seed(0)
    )
    save_file(weights, untied / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((untied / "config.json").read_text())
    config.pop("scale_decoder_outputs")
    (untied / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    model = js.models.from_pretrained(untied)
    assert model.lm_head.weight is not model.shared.weight
    reference = transformers.T5ForConditionalGeneration.from_pretrained(untied).eval()
    assert max(map(relative_error, _outputs(model), _outputs(reference))) < 1e-4
    model.save_pretrained(tmp_path / "back")
    back = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "back").eval()
    assert max(map(relative_error, _outputs(back), _outputs(model))) < 1e-4


@pytest.mark.parametrize("case", ["t5-v1.0"], indirect=True)  # one case for the headless classes
def test_encoder_and_base_models(case, transformers):
    _, _, folder = case
    encoder = T5EncoderModel.from_pretrained(folder)
    expected = _torch(
        transformers.T5EncoderModel.from_pretrained(folder).eval(),
        input_ids=SOURCE,
        attention_mask=SOURCE_MASK,
    )
    assert relative_error(encoder(SOURCE, SOURCE_MASK), expected.last_hidden_state) < 1e-4
    base = T5Model.from_pretrained(folder)
    hidden = _torch(
        transformers.T5Model.from_pretrained(folder).eval(),
        input_ids=SOURCE,
        attention_mask=SOURCE_MASK,
        decoder_input_ids=TARGET,
    )
    assert relative_error(base(SOURCE, SOURCE_MASK, TARGET), hidden.last_hidden_state) < 1e-4


def test_config_derives_the_feed_forward_and_the_head_scaling():
    assert (T5Config().is_gated_act, T5Config().dense_act_fn) == (False, "relu")
    flan = T5Config(feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    assert (flan.is_gated_act, flan.dense_act_fn, flan.scale_decoder_outputs) == (
        True,
        "gelu_new",
        False,
    )
    with pytest.raises(ValueError, match="feed_forward_proj='gelu-gated' is not"):
        T5Config(feed_forward_proj="gelu-gated")
