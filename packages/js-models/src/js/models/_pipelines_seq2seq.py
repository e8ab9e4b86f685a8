"""The encoder-decoder tasks of ``js.models.pipeline``: ``text2text-generation``,
``summarization`` and ``translation`` on T5 and BART folders, and ``automatic-speech-recognition``
on Whisper folders, each through the model's ``generate``.

The three text tasks follow transformers 4's pipelines (transformers 5 removed them): the input
is prefixed with the config's ``prefix``, or the ``prefix`` of ``task_specific_params[task]``
(T5's ``"summarize: "``, ``"translate English to German: "``), whose other keys
(``num_beams``, ``max_length``, ``min_length``...) become generation defaults; a string gives
``[{"<name>_text": ...}]``, a list of strings one such dict per input (a list of them with
``num_return_sequences > 1``). Speech recognition follows transformers 5.23's pipeline for short
Whisper audio (up to the feature extractor's ``chunk_length``, 30 s).

The sources of a batch are right-padded (``attention_mask`` 0) and the batch filled up to a
power of two rows (copies of its first input, dropped from the results), so a stream of
requests compiles a bounded number of programs; ``generate`` buckets the source length.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

import js

from ._generation import generation_config
from ._pipeline_base import Pipeline, _padded
from ._seq2seq import Seq2SeqGenerationMixin
from .whisper_features import WhisperFeatureExtractor

# Call options a pipeline reads itself; the others go to the model's ``generate``.
_PIPELINE_OPTIONS = ("return_text", "return_tensors", "clean_up_tokenization_spaces", "seed")
# transformers 5.23's automatic-speech-recognition defaults, for what neither the call nor the
# folder's generation_config.json sets (a set max_length keeps max_new_tokens out).
_ASR_DEFAULTS = {"max_new_tokens": 256, "num_beams": 5}
# transformers' automatic-speech-recognition options that js does not implement.
_ASR_REFUSED = ("return_timestamps", "chunk_length_s", "stride_length_s", "return_language")


def _filled(rows: list[dict[str, Any]], limit: int | None, batch: int) -> dict[str, np.ndarray]:
    """``_padded``'s arrays with the rows after the inputs copies of the first one (a real
    source: ``generate`` refuses rows of padding only)."""
    arrays = _padded(rows, limit, batch)
    for array in arrays.values():
        array[len(rows) :] = array[0]
    return arrays


def _min_new_tokens(settings: dict[str, Any], folder: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with transformers' ``min_length`` (the decoder's tokens, its start token
    among them) as ``min_new_tokens``, the call's or the folder's generation config's."""
    settings = dict(settings)
    min_length = settings.pop("min_length", None) or folder.get("min_length") or 0
    new = settings.get("min_new_tokens") or folder.get("min_new_tokens") or 0
    if min_length > 1 and min_length - 1 > new:
        settings["min_new_tokens"] = min_length - 1
    return settings


class _Generating(Pipeline):
    """What the encoder-decoder tasks share: options for ``generate`` (the call's, then the
    pipeline's, then ``defaults``; ``seed`` seeds sampling, default 0), sources padded to
    bucketed batches, and ``tokens`` rows decoded without special tokens."""

    model_inputs = ("input_ids", "attention_mask")

    def __init__(self, folder: str | os.PathLike, **options: Any):
        super().__init__(folder, **options)
        if not isinstance(self.model, Seq2SeqGenerationMixin):
            raise ValueError(
                f"pipeline({self.task!r}): {type(self.model).__name__} is not an "
                "encoder-decoder that generates. Fix: a folder of T5ForConditionalGeneration, "
                "BartForConditionalGeneration or WhisperForConditionalGeneration"
            )
        self.defaults: dict[str, Any] = {}

    def settings(self, options: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of ``model.generate`` for a call with ``options``."""
        given = {k: v for k, v in options.items() if k not in self.own_options()}
        settings = {**self.defaults, **given}
        folder = generation_config(self.model)
        if settings.get("do_sample", folder.get("do_sample")):
            settings["rngs"] = js.Rngs(sample=options.get("seed", 0))
        return settings

    def own_options(self) -> tuple[str, ...]:
        """The call options this task reads itself (``generate`` gets the others)."""
        return _PIPELINE_OPTIONS

    def generated(self, rows: list[dict[str, Any]], settings: dict[str, Any]) -> np.ndarray:
        """``generate``'s tokens ``[len(rows) * n, T]`` (``n = num_return_sequences``) of rows
        of ``model_inputs``, run as one batch filled to a power of two rows."""
        limit = getattr(self.config, "max_position_embeddings", None)
        arrays = _filled(rows, limit, self.batch_size)
        source = arrays.pop(self.model_inputs[0])
        tokens = np.asarray(self.model.generate(source, **arrays, **settings))
        return tokens[: len(rows) * settings.get("num_return_sequences", 1)]

    def text(self, tokens: np.ndarray, clean_up: bool | None = None) -> str:
        """A row of generated tokens as text, special tokens skipped (``clean_up``: the
        tokenizer's ``clean_up_tokenization_spaces``; None: its config's)."""
        return self.tokenizer.decode(
            tokens, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up
        )


class Text2TextGeneration(_Generating):
    """transformers 4's ``text2text-generation``: ``[{"generated_text"}]`` for a string, one
    such dict per input for a list (a list of ``num_return_sequences`` dicts each where that is
    above 1). Each input is prefixed with the config's ``prefix`` (or its task's, in
    ``task_specific_params``); options: ``return_tensors`` (True: ``"generated_token_ids"``,
    the decoder's tokens, instead of the text), ``return_text`` (accepted; as in transformers 4
    the text is returned unless ``return_tensors``), ``clean_up_tokenization_spaces`` (default
    False), ``truncation`` (of the source, to ``max_length`` or the tokenizer's
    ``model_max_length``), ``seed`` (sampling), and the model's ``generate`` options
    (``max_new_tokens``, ``num_beams``, ``min_length``...; defaults: the task's
    ``task_specific_params``, then the folder's ``generation_config.json``)."""

    task = "text2text-generation"
    return_name = "generated"

    def __init__(self, folder: str | os.PathLike, **options: Any):
        super().__init__(folder, **options)
        params = dict(self.task_params())
        prefix = (
            params.pop("prefix") if "prefix" in params else getattr(self.config, "prefix", None)
        )
        self.prefix: str = prefix or ""
        self.defaults = params

    def task_params(self) -> dict[str, Any]:
        """``config.task_specific_params[task]`` (empty where absent)."""
        params = getattr(self.config, "task_specific_params", None) or {}
        return params.get(self.task) or {}

    def own_options(self) -> tuple[str, ...]:
        return (*_PIPELINE_OPTIONS, "truncation")

    def __call__(self, inputs: Any, **options: Any) -> Any:
        result = super().__call__(inputs, **options)
        if self.single(inputs) or any(len(records) != 1 for records in result):
            return result
        return [records[0] for records in result]

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        bad = [type(item).__name__ for item in items if not isinstance(item, str)]
        if bad:
            raise TypeError(
                f"pipeline({self.task!r}): inputs must be strings or a list of strings, got "
                f"{bad[0]}. Fix: pass the text(s) to {self.task}"
            )
        settings = _min_new_tokens(self.settings(options), generation_config(self.model))
        copies = settings.get("num_return_sequences", 1)
        truncation = options.get("truncation", False)
        for start in range(0, len(items), self.batch_size):
            texts = [self.prefix + text for text in items[start : start + self.batch_size]]
            encoded = self.tokenizer(
                texts, truncation=truncation, return_tensors=None, return_attention_mask=True
            )
            rows = [
                {"input_ids": ids, "attention_mask": mask}
                for ids, mask in zip(encoded["input_ids"], encoded["attention_mask"], strict=True)
            ]
            tokens = self.generated(rows, settings)
            for i in range(len(texts)):
                yield {"tokens": tokens[i * copies : (i + 1) * copies]}

    def postprocess(
        self, row: dict[str, Any], *, return_tensors: bool = False, return_text: bool = True,
        clean_up_tokenization_spaces: bool = False, **options: Any,
    ) -> list[dict[str, Any]]:  # fmt: skip
        if return_tensors:
            return [{f"{self.return_name}_token_ids": tokens} for tokens in row["tokens"]]
        return [
            {f"{self.return_name}_text": self.text(tokens, clean_up_tokenization_spaces)}
            for tokens in row["tokens"]
        ]


class Summarization(Text2TextGeneration):
    """transformers 4's ``summarization``: ``[{"summary_text"}]`` (options and prefix as
    ``text2text-generation``'s; T5's prefix is ``"summarize: "``)."""

    task = "summarization"
    return_name = "summary"


class Translation(Text2TextGeneration):
    """transformers 4's ``translation``: ``[{"translation_text"}]`` (options as
    ``text2text-generation``'s). ``translation`` takes the first ``translation_*`` entry of
    ``task_specific_params`` (T5's English to German), ``translation_en_to_fr`` (and T5's
    other pairs) that one. Multilingual tokenizers' ``src_lang``/``tgt_lang`` (NLLB, M2M100,
    mBART) are not supported."""

    task = "translation"
    return_name = "translation"

    def task_params(self) -> dict[str, Any]:
        params = getattr(self.config, "task_specific_params", None) or {}
        if self.task == "translation":  # transformers 4's pipeline(): the first pair
            return next((v for k, v in params.items() if k.startswith("translation")), {})
        return params.get(self.task) or {}

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for name in ("src_lang", "tgt_lang"):
            if options.get(name) is not None:
                raise NotImplementedError(
                    f"pipeline({self.task!r}): {name} (multilingual tokenizers: NLLB, M2M100, "
                    "mBART) is not supported. Fix: leave it out; T5 takes its language pair "
                    "from the task (translation_en_to_de, ...)"
                )
        return super().run(items, options)


def language_pair(source: str, target: str) -> type[Translation]:
    """``translation_<source>_to_<target>``: ``Translation`` on that task's parameters."""
    name = f"translation_{source}_to_{target}"
    return type(f"Translation_{source}_to_{target}", (Translation,), {"task": name})


def _audio(item: Any, rate: int) -> np.ndarray:
    """One clip's float32 samples at ``rate`` Hz: an array, or ``{"raw" or "array",
    "sampling_rate"}``."""
    given = rate
    if isinstance(item, dict):
        if "sampling_rate" not in item or not ({"raw", "array"} & item.keys()):
            raise ValueError(
                "pipeline('automatic-speech-recognition'): a dict input needs 'raw' (or "
                f"'array') and 'sampling_rate', got keys {sorted(item)}"
            )
        given = item["sampling_rate"]
        item = item["raw"] if "raw" in item else item["array"]
    if not isinstance(item, np.ndarray) or item.ndim != 1 or item.dtype.kind != "f":
        raise TypeError(
            "pipeline('automatic-speech-recognition'): audio must be a 1-d float NumPy array "
            f"(mono samples), got {type(item).__name__} {getattr(item, 'shape', '')}. Fix: "
            "decode files yourself; mix channels down, e.g. audio.mean(axis=0)"
        )
    if given != rate:
        raise ValueError(
            f"pipeline('automatic-speech-recognition'): audio at {given} Hz, the model takes "
            f"{rate} Hz (transformers resamples with torchaudio; js does not). Fix: resample "
            "first, e.g. scipy.signal.resample_poly(audio, 16000, rate)"
        )
    return item.astype(np.float32)


class AutomaticSpeechRecognition(_Generating):
    """transformers 5.23's ``automatic-speech-recognition`` on a Whisper folder: ``{"text"}``
    for a clip of up to ``chunk_length`` seconds (30): a float 16 kHz mono NumPy array, or
    ``{"raw": array, "sampling_rate": 16000}`` (no resampling); a list of clips gives a list.
    Log-mel features by ``WhisperFeatureExtractor``; ``generate``'s options (``language``,
    ``task``, ``max_new_tokens``, ``num_beams``..., also as ``generate_kwargs={...}``); what
    neither the call nor the folder's generation config sets takes transformers' pipeline
    defaults, ``max_new_tokens=256`` (not where ``max_length`` is set) and beam search with
    ``num_beams=5`` (``num_beams=1``: greedy). Timestamps and the chunking of longer audio
    are not implemented."""

    task = "automatic-speech-recognition"
    files = ("tokenizer.json", "preprocessor_config.json")
    model_inputs = ("input_features",)

    def __init__(self, folder: str | os.PathLike, **options: Any):
        super().__init__(folder, **options)
        if self.config.model_type != "whisper":
            raise ValueError(
                f"pipeline({self.task!r}): model_type {self.config.model_type!r} is not "
                "supported. Fix: a Whisper folder (WhisperForConditionalGeneration)"
            )
        self.extractor = WhisperFeatureExtractor.from_pretrained(self.folder)
        preset = generation_config(self.model)  # the folder's generation_config.json
        blocked = {*preset, *(["max_new_tokens"] if preset.get("max_length") else [])}
        self.defaults = {k: v for k, v in _ASR_DEFAULTS.items() if k not in blocked}

    def own_options(self) -> tuple[str, ...]:
        return (*_PIPELINE_OPTIONS, *_ASR_REFUSED)

    def settings(self, options: dict[str, Any]) -> dict[str, Any]:
        refused = [name for name in _ASR_REFUSED if options.get(name)]
        if refused:
            raise NotImplementedError(
                f"pipeline({self.task!r}): {', '.join(refused)} not implemented (short-form "
                "audio, text only). Fix: leave them out"
            )
        options = {**(options.get("generate_kwargs") or {}), **options}  # transformers 5's
        settings = super().settings({k: v for k, v in options.items() if k != "generate_kwargs"})
        if "max_length" in options and "max_new_tokens" not in options:
            settings.pop("max_new_tokens", None)  # transformers: a set max_length wins
        return settings

    def single(self, inputs: Any) -> bool:
        return not isinstance(inputs, (list, tuple))

    def preprocess(self, item: Any) -> dict[str, Any]:
        audio = _audio(item, self.extractor.sampling_rate)
        if audio.size > self.extractor.n_samples:
            raise NotImplementedError(
                f"pipeline({self.task!r}): {audio.size / self.extractor.sampling_rate:.1f} s of "
                f"audio, over the model's {self.extractor.chunk_length} s window; long-form "
                "transcription is not implemented. Fix: split the audio into shorter clips"
            )
        features = self.extractor(audio, sampling_rate=self.extractor.sampling_rate)
        return {"input_features": features["input_features"][0]}

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        settings = self.settings(options)
        for start in range(0, len(items), self.batch_size):
            rows = [self.preprocess(item) for item in items[start : start + self.batch_size]]
            yield from ({"tokens": tokens} for tokens in self.generated(rows, settings))

    def postprocess(self, row: dict[str, Any], **options: Any) -> dict[str, str]:
        return {"text": self.text(row["tokens"])}


PIPELINES = (
    Text2TextGeneration,
    Summarization,
    Translation,
    *(language_pair(*pair) for pair in (("en", "de"), ("en", "fr"), ("en", "ro"))),
    AutomaticSpeechRecognition,
)
