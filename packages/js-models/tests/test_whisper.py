"""Whisper against transformers: the log-mel features of ``WhisperFeatureExtractor`` on synthetic
audio (tones and noise, 16 kHz, float32, a padded batch of two lengths), and tiny random
``WhisperForConditionalGeneration`` models (80 and 128 mel bins, every 1-D weight perturbed)
both ways: encoder outputs and decoder logits of a right-padded batch within 1e-4, and js's
folder read back by transformers with js's logits."""

from __future__ import annotations

import json

import numpy as np
import pytest
from family_support import perturb, relative_error

import js.models
from js.models import WhisperFeatureExtractor
from js.models.whisper import WhisperForConditionalGeneration, WhisperModel, forced_prompt

RATE = 16000


def _audio() -> list[np.ndarray]:
    """Two clips, 3 s and 2 s: a tone plus noise, and a chord plus quieter noise."""
    rng = np.random.default_rng(0)
    t = np.arange(3 * RATE) / RATE
    first = 0.5 * np.sin(2 * np.pi * 440 * t) + 0.1 * rng.standard_normal(t.size)
    t = t[: 2 * RATE]
    chord = 0.3 * np.sin(2 * np.pi * 1234 * t) + 0.2 * np.sin(2 * np.pi * 3000 * t)
    second = chord + 0.05 * rng.standard_normal(t.size)
    return [first.astype(np.float32), second.astype(np.float32)]


@pytest.mark.parametrize("n_mels", [80, 128])
def test_features_match_transformers(transformers, n_mels, tmp_path):
    reference = transformers.WhisperFeatureExtractor(feature_size=n_mels)
    reference.save_pretrained(tmp_path)
    extractor = WhisperFeatureExtractor.from_pretrained(tmp_path)
    audio = _audio()
    for options in ({}, {"padding": "longest", "return_attention_mask": True}):
        got = extractor(audio, sampling_rate=RATE, **options)
        expected = reference(audio, sampling_rate=RATE, return_tensors="np", **options)
        assert got["input_features"].shape == expected["input_features"].shape
        assert got["input_features"].dtype == np.float32
        error = relative_error(got["input_features"], expected["input_features"])
        print(n_mels, options, "max relative difference", error)
        assert error < 1e-4
        if options:
            np.testing.assert_array_equal(got["attention_mask"], expected["attention_mask"])
    # one clip without a batch axis
    single = extractor(audio[1], sampling_rate=RATE)["input_features"]
    expected = reference(audio[1], sampling_rate=RATE, return_tensors="np")["input_features"]
    assert single.shape == (1, n_mels, 3000) and relative_error(single, expected) < 1e-4
    extractor.save_pretrained(tmp_path / "js")
    back = transformers.WhisperFeatureExtractor.from_pretrained(tmp_path / "js")
    assert (back.feature_size, back.n_samples) == (n_mels, 30 * RATE)
    assert (
        json.loads((tmp_path / "js" / "preprocessor_config.json").read_text())["feature_size"]
        == n_mels
    )


def test_feature_errors():
    extractor = WhisperFeatureExtractor()
    with pytest.raises(ValueError, match="audio at 8000 Hz, expected 16000 Hz"):
        extractor(np.zeros(100, np.float32), sampling_rate=8000)
    with pytest.raises(ValueError, match="must be mono"):
        extractor(np.zeros((1, 2, 100), np.float32))
    with pytest.raises(ValueError, match="padding='do_not_pad' is not supported"):
        extractor(np.zeros(100, np.float32), padding="do_not_pad")
    with pytest.raises(NotImplementedError, match="only NumPy arrays"):
        extractor(np.zeros(100, np.float32), return_tensors="pt")
    with pytest.raises(FileNotFoundError, match="preprocessor_config.json"):
        WhisperFeatureExtractor.from_pretrained("/nonexistent")


TINY = {
    "vocab_size": 96,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_source_positions": 32,  # 64 feature frames: the model's shapes, not the 30 s window
    "max_target_positions": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 89,
    "init_std": 0.3,  # logits far apart: greedy tokens vary (0.02 repeats one token)
}
# Whisper's special tokens at the end of the tiny vocabulary (every id above
# no_timestamps_token_id would be a timestamp). Without suppression the 80-bin model's greedy
# tokens (language fr, translate) are mostly 65 and 80, and row 0 starts with 59.
GENERATION = {
    "decoder_start_token_id": 88,  # the generation config's start token wins over config.json's
    "lang_to_id": {"<|en|>": 90, "<|fr|>": 91},
    "task_to_id": {"transcribe": 92, "translate": 93},
    "no_timestamps_token_id": 95,
    "is_multilingual": True,
    "forced_decoder_ids": [[1, None], [2, 92]],
    "suppress_tokens": [65, 80, 7],
    "begin_suppress_tokens": [59, 2],
}
DECODER_MASK = np.array([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]])
DECODER_IDS = np.random.default_rng(1).integers(3, 96, DECODER_MASK.shape)


@pytest.fixture(scope="module", params=[80, 128])
def whisper(request, transformers, tmp_path_factory):
    """``(transformers model, its folder, input_features)`` of a tiny perturbed Whisper."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    config = transformers.WhisperConfig(num_mel_bins=request.param, **TINY)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    perturb(model)
    for key, value in GENERATION.items():
        setattr(model.generation_config, key, value)
    folder = tmp_path_factory.mktemp(f"whisper{request.param}")
    model.save_pretrained(folder)
    features = np.random.default_rng(0).standard_normal((2, request.param, 64))
    return model, folder, features.astype(np.float32)


def _torch_outputs(model, features):
    import torch

    with torch.no_grad():
        out = model(
            torch.tensor(features),
            decoder_input_ids=torch.tensor(DECODER_IDS),
            decoder_attention_mask=torch.tensor(DECODER_MASK),
        )
    return out.encoder_last_hidden_state.numpy(), out.logits.numpy()


def test_whisper_loads_both_ways(transformers, whisper, tmp_path):
    reference, folder, features = whisper
    model = js.models.from_pretrained(folder)
    assert type(model) is WhisperForConditionalGeneration
    encoded, logits = _torch_outputs(reference, features)
    ours = np.asarray(model(features, DECODER_IDS, DECODER_MASK))
    errors = {
        "encoder": relative_error(model.model.encoder(features), encoded),
        "logits": relative_error(ours, logits),
    }
    model.save_pretrained(tmp_path)
    back = transformers.WhisperForConditionalGeneration.from_pretrained(tmp_path).eval()
    errors["transformers from js"] = relative_error(_torch_outputs(back, features)[1], ours)
    print(features.shape[1], "mel bins", errors)
    assert max(errors.values()) < 1e-4
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == ["WhisperForConditionalGeneration"]
    assert written["model_type"] == "whisper"
    # the base model from the same folder: the decoder's last hidden state and the encoder's
    base = WhisperModel.from_pretrained(folder)
    hidden, base_encoded = base(features, DECODER_IDS, DECODER_MASK)
    assert relative_error(base_encoded, encoded) < 1e-4
    assert relative_error(model.proj_out(hidden), logits) < 1e-4


def test_whisper_errors(whisper):
    _, folder, features = whisper
    model = js.models.from_pretrained(folder)
    with pytest.raises(ValueError, match=r"input_features must be \[B, num_mel_bins, frames\]"):
        model(features[:, :, :32], DECODER_IDS)
    with pytest.raises(ValueError, match="exactly one of input_features and encoder_outputs"):
        model(None, DECODER_IDS)
    with pytest.raises(ValueError, match="language='de' is not in the generation config's"):
        model.generate(features, language="de", max_new_tokens=2)
    with pytest.raises(ValueError, match="task='dance' is not in the generation config's"):
        model.generate(features, language="en", task="dance", max_new_tokens=2)
    with pytest.raises(ValueError, match="English-only"):
        forced_prompt(model, features, {"is_multilingual": False}, "en", None)


def _greedy(whisper, **options):
    """js's greedy tokens, asserted equal to transformers' ``generate``; returns them."""
    import torch

    reference, folder, features = whisper
    reference.generation_config.eos_token_id = None  # 24 tokens whatever the tiny model says
    with torch.inference_mode():
        expected = reference.generate(torch.tensor(features), max_new_tokens=24, **options)
    model = js.models.from_pretrained(folder)
    got = np.asarray(model.generate(features, max_new_tokens=24, eos_token_id=[], **options))
    np.testing.assert_array_equal(got, expected.numpy())
    assert got.shape == (2, 24)
    assert not np.isin(got, GENERATION["suppress_tokens"]).any()
    assert not np.isin(got[:, 0], GENERATION["begin_suppress_tokens"]).any()
    return got


def test_whisper_generates_as_transformers(whisper):
    if whisper[2].shape[1] != 80:
        pytest.skip("the 80-bin model is enough: the decoder does not see the mel bins")
    print("greedy tokens match", _greedy(whisper, language="fr", task="translate")[:, :8].tolist())


@pytest.mark.slow
def test_whisper_detects_the_language(whisper):
    """No language given: the forced prompt's language slot is detected per row."""
    if whisper[2].shape[1] != 80:
        pytest.skip("the 80-bin model is enough")
    _greedy(whisper)


@pytest.mark.parametrize(
    "beams, length_penalty", [(2, 1.0), pytest.param(4, 0.5, marks=pytest.mark.slow)]
)
def test_whisper_beam_search_as_transformers(whisper, beams, length_penalty):
    """Beam search after the forced prompt, the suppressed tokens barred after the
    log-softmax (as transformers' processors), so the beams' scores and order match."""
    import torch

    if whisper[2].shape[1] != 80:
        pytest.skip("the 80-bin model is enough")
    reference, folder, features = whisper
    options = dict(
        max_new_tokens=8,
        language="fr",
        task="translate",
        num_beams=beams,
        length_penalty=length_penalty,
        eos_token_id=2,
    )
    with torch.inference_mode():
        expected = reference.generate(torch.tensor(features), **options).numpy()
    got = js.models.from_pretrained(folder).generate(features, **options)
    np.testing.assert_array_equal(np.asarray(got), expected)
    assert not np.isin(expected, GENERATION["suppress_tokens"]).any()
