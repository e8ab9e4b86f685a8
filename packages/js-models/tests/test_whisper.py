"""Whisper against transformers: the log-mel features of ``WhisperFeatureExtractor`` on synthetic
audio (tones and noise, 16 kHz, float32, a padded batch of two lengths)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from family_support import relative_error

from js.models import WhisperFeatureExtractor

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
