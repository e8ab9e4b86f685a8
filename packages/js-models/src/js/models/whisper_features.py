"""Whisper's audio front end: the log-mel spectrogram of 16 kHz speech, in NumPy.

The same numbers as transformers' ``WhisperFeatureExtractor`` (``audio_utils.mel_filter_bank``,
``window_function``, ``spectrogram``), without torch or librosa: each clip is padded with
``padding_value`` or cut to ``chunk_length`` seconds, framed by a centred (reflect-padded) STFT
with a periodic Hann window, its power spectrum projected on Slaney mel filters, and the last
frame dropped; then ``log10`` (floor 1e-10), clamped to 8 below the clip's maximum and mapped
by ``(x + 4) / 4``. All frames of a batch go through one ``rfft``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["WhisperFeatureExtractor", "mel_filter_bank"]

PREPROCESSOR_NAME = "preprocessor_config.json"
_SETTINGS = (
    "feature_size",
    "sampling_rate",
    "hop_length",
    "chunk_length",
    "n_fft",
    "padding_value",
)


def _hertz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above (librosa's ``htk=False``)."""
    mels = 3.0 * freq / 200.0
    logarithmic = freq >= 1000.0
    mels[logarithmic] = 15.0 + np.log(freq[logarithmic] / 1000.0) * (27.0 / np.log(6.4))
    return mels


def _mel_to_hertz(mels: np.ndarray) -> np.ndarray:
    freq = 200.0 * mels / 3.0
    logarithmic = mels >= 15.0
    freq[logarithmic] = 1000.0 * np.exp(np.log(6.4) / 27.0 * (mels[logarithmic] - 15.0))
    return freq


def mel_filter_bank(
    n_fft: int, n_mels: int, sampling_rate: int, max_frequency: float = 8000.0
) -> np.ndarray:
    """Slaney-normalised triangular mel filters, float64 ``[n_fft // 2 + 1, n_mels]`` (transformers'
    ``mel_filter_bank(norm="slaney", mel_scale="slaney")`` from 0 Hz)."""
    edges = _mel_to_hertz(np.linspace(0.0, _hertz_to_mel(np.array([max_frequency]))[0], n_mels + 2))
    bins = np.linspace(0, sampling_rate // 2, n_fft // 2 + 1)
    slopes = edges[None, :] - bins[:, None]  # [frequencies, n_mels + 2]
    widths = np.diff(edges)
    down, up = -slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]
    return np.maximum(0.0, np.minimum(down, up)) * (2.0 / (edges[2:] - edges[:-2]))


class WhisperFeatureExtractor:
    """Log-mel features of 16 kHz mono audio for Whisper, as transformers computes them.

    Args:
        feature_size: mel bins (80, or 128 for large-v3).
        sampling_rate: the audio's rate in Hz; other rates are refused.
        hop_length: samples between frames.
        chunk_length: seconds every clip is padded or cut to
            (``n_samples = chunk_length * sampling_rate``).
        n_fft: frame and FFT length in samples.
        padding_value: the sample value audio is padded with.
        return_attention_mask: default of ``__call__``'s argument.

    Shape:
        ``__call__`` returns ``input_features`` ``float32 [B, feature_size, n_samples //
        hop_length]`` (``[B, 80, 3000]`` by default), and ``attention_mask`` ``int32 [B, frames]``
        when asked.

    Example:
        >>> import numpy as np
        >>> from js.models import WhisperFeatureExtractor
        >>> extractor = WhisperFeatureExtractor(feature_size=80)
        >>> tone = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000).astype(np.float32)
        >>> extractor(tone, sampling_rate=16000)["input_features"].shape
        (1, 80, 3000)
    """

    def __init__(
        self,
        feature_size: int = 80,
        sampling_rate: int = 16000,
        hop_length: int = 160,
        chunk_length: int = 30,
        n_fft: int = 400,
        padding_value: float = 0.0,
        return_attention_mask: bool = False,
        **extra: Any,
    ) -> None:
        self.feature_size, self.sampling_rate = feature_size, sampling_rate
        self.hop_length, self.chunk_length = hop_length, chunk_length
        self.n_fft, self.padding_value = n_fft, padding_value
        self.return_attention_mask = return_attention_mask
        self.extra = extra  # the folder's other keys, written back by save_pretrained
        self.n_samples = chunk_length * sampling_rate
        self.nb_max_frames = self.n_samples // hop_length
        self.mel_filters = mel_filter_bank(n_fft, feature_size, sampling_rate)
        # transformers' window_function(n_fft, "hann"): periodic, a symmetric n_fft + 1 window
        # without its last sample
        self.window = np.hanning(n_fft + 1)[:-1]

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> WhisperFeatureExtractor:
        """The extractor a folder's ``preprocessor_config.json`` describes."""
        file = Path(path) / PREPROCESSOR_NAME
        if not file.is_file():
            raise FileNotFoundError(
                f"WhisperFeatureExtractor.from_pretrained: {file} does not exist. Fix: pass a "
                "Whisper folder holding preprocessor_config.json (one transformers' "
                "save_pretrained or snapshot_download wrote)"
            )
        settings = json.loads(file.read_text())
        for derived in ("n_samples", "nb_max_frames", "mel_filters", "feature_extractor_type"):
            settings.pop(derived, None)
        return cls(**settings)

    def to_dict(self) -> dict[str, Any]:
        """``preprocessor_config.json``'s contents."""
        settings = {name: getattr(self, name) for name in _SETTINGS}
        return {
            **self.extra,
            **settings,
            "feature_extractor_type": "WhisperFeatureExtractor",
            "n_samples": self.n_samples,
            "nb_max_frames": self.nb_max_frames,
            "return_attention_mask": self.return_attention_mask,
        }

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write ``preprocessor_config.json`` into the folder (made if missing)."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / PREPROCESSOR_NAME).write_text(
            json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        )

    def _clips(self, raw_speech: Any) -> list[np.ndarray]:
        if isinstance(raw_speech, np.ndarray) and raw_speech.ndim > 2:
            raise ValueError(
                "WhisperFeatureExtractor: raw_speech must be mono, [samples] or [batch, "
                f"samples]; got shape {raw_speech.shape}. Fix: mix the channels down (e.g. "
                "audio.mean(-1)) first"
            )
        batched = (isinstance(raw_speech, np.ndarray) and raw_speech.ndim == 2) or (
            isinstance(raw_speech, (list, tuple))
            and len(raw_speech)
            and np.ndim(raw_speech[0]) == 1
        )
        clips = raw_speech if batched else [raw_speech]
        return [np.asarray(clip, dtype=np.float32) for clip in clips]

    def _pad(
        self, clips: list[np.ndarray], padding: str | bool, max_length: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The clips cut to ``max_length`` (default ``n_samples``) and padded, ``[B, samples]``,
        and their mask."""
        if padding in ("max_length", True):
            length = max_length or self.n_samples
        elif padding == "longest":
            length = min(max(len(clip) for clip in clips), max_length or self.n_samples)
        else:
            raise ValueError(
                f"WhisperFeatureExtractor: padding={padding!r} is not supported. Fix: use "
                "'max_length' (Whisper's 30 s windows) or 'longest'"
            )
        audio = np.full((len(clips), length), self.padding_value, dtype=np.float32)  # [B, samples]
        mask = np.zeros((len(clips), length), dtype=np.int32)
        for row, clip in enumerate(clips):
            audio[row, : len(clip[:length])], mask[row, : len(clip[:length])] = clip[:length], 1
        return audio, mask

    def log_mel(self, audio: np.ndarray) -> np.ndarray:
        """Log-mel features ``float32 [B, feature_size, samples // hop_length]`` of padded audio
        ``[B, samples]``."""
        half = self.n_fft // 2
        padded = np.pad(audio.astype(np.float64), ((0, 0), (half, half)), mode="reflect")
        frames = (padded.shape[1] - self.n_fft) // self.hop_length  # the last frame is dropped
        starts = np.arange(frames) * self.hop_length
        windows = (
            padded[:, starts[:, None] + np.arange(self.n_fft)] * self.window
        )  # [B, frames, n_fft]
        spectrum = np.fft.rfft(windows, axis=-1).astype(
            np.complex64
        )  # transformers keeps complex64
        power = np.abs(spectrum, dtype=np.float64) ** 2  # [B, frames, n_fft // 2 + 1]
        mel = np.log10(np.maximum(1e-10, power @ self.mel_filters)).astype(
            np.float32
        )  # [B, frames, n_mels]
        mel = np.maximum(mel, mel.max(axis=(1, 2), keepdims=True) - 8.0)
        return ((mel + 4.0) / 4.0).transpose(0, 2, 1)

    def __call__(
        self,
        raw_speech: Any,
        *,
        sampling_rate: int | None = None,
        return_tensors: str | None = "np",
        padding: str | bool = "max_length",
        max_length: int | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict[str, np.ndarray]:
        """Features of one clip (``[samples]``) or a batch (``[B, samples]`` or a list of
        1-D clips).

        Args:
            raw_speech: float audio at ``sampling_rate``, in [-1, 1].
            sampling_rate: the audio's rate; must equal the extractor's.
            return_tensors: ``"np"`` (or None) for NumPy arrays.
            padding: ``"max_length"`` (to ``max_length`` or ``n_samples``) or ``"longest"``.
            max_length: samples to pad or cut to.
            return_attention_mask: also return which frames hold audio (default: the config's).
        """
        if sampling_rate is not None and sampling_rate != self.sampling_rate:
            raise ValueError(
                f"WhisperFeatureExtractor: audio at {sampling_rate} Hz, expected "
                f"{self.sampling_rate} Hz. Fix: resample the audio to {self.sampling_rate} Hz first"
            )
        if return_tensors not in (None, "np"):
            raise NotImplementedError(
                f"WhisperFeatureExtractor: return_tensors={return_tensors!r}; only NumPy arrays "
                "are returned. Fix: pass return_tensors='np' (js models take NumPy arrays)"
            )
        audio, mask = self._pad(self._clips(raw_speech), padding, max_length)
        features = {"input_features": self.log_mel(audio)}
        if self.return_attention_mask if return_attention_mask is None else return_attention_mask:
            frames = mask[:, :: self.hop_length]
            features["attention_mask"] = (
                frames[:, :-1] if mask.shape[1] % self.hop_length else frames
            )
        return features
