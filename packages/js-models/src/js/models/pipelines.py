"""``js.models.pipeline(task, folder)``: text, images or chats in, transformers' pipeline outputs
out, from a local model folder (its weights, ``tokenizer.json``, ``preprocessor_config.json``).

Each task is a small ``Pipeline`` subclass: ``preprocess`` turns one input into arrays,
``postprocess`` turns one row of the model's outputs into transformers' result (the same keys,
labels from ``id2label``, scores as transformers computes them). The base class batches: inputs
are taken ``batch_size`` at a time, each batch padded (masked-out zeros after the rows and the
tokens) to a power-of-two number of rows and of tokens, and run by one compiled program
(``js.jit``) per padded shape, so a stream of requests of any lengths compiles a bounded number
of programs (``TRACES`` counts them). ``text-generation`` batches the same way and hands the
left-padded prompts to ``js.models.generate``, which buckets its own shapes.

Tasks (transformers 5.23's names and call conventions): ``feature-extraction``,
``sentence-similarity`` (the Hugging Face hub's task, which transformers lacks),
``text-classification``, ``fill-mask``, ``token-classification``, ``image-classification``,
``zero-shot-image-classification`` and ``text-generation``.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import jax
import numpy as np

import js

from ._generation import generate
from ._pretrained import from_pretrained
from .image_processor import ImageProcessor
from .sentence_transformers import SentenceTransformer, _bucket
from .tokenizer import Tokenizer

__all__ = ["TASKS", "Pipeline", "pipeline"]

# Programs the pipelines' model calls traced, by model class (tests count them).
TRACES: collections.Counter[str] = collections.Counter()


@js.jit
def _forward(model: Any, inputs: Mapping[str, Any]) -> Any:
    """The model on one padded batch: one program per model and batch shape."""
    TRACES[type(model).__name__] += 1
    return model(**inputs)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


_FUNCTIONS = {"softmax": _softmax, "sigmoid": _sigmoid, "none": lambda x: x}


def _padded(rows: list[dict[str, Any]], limit: int | None, batch: int) -> dict[str, np.ndarray]:
    """Rows of equal keys (token lists, or arrays of one shape) as arrays padded with zeros
    after the rows (to a power of two, at most ``batch``) and, for token lists, after the
    tokens (to a power of two >= 8, at most ``limit``)."""
    count, out = len(rows), {}
    for key in rows[0]:
        values = [row[key] for row in rows]
        if isinstance(values[0], list):  # tokens [L_i]
            length = _bucket(max(map(len, values)), limit, 8)
            array = np.zeros((count, length), np.int32)
            for i, value in enumerate(values):
                array[i, : len(value)] = value
        else:
            array = np.stack(values)
        shape = (_bucket(count, batch) - count, *[(0, 0)] * (array.ndim - 1))
        out[key] = np.pad(array, [(0, shape[0]), *shape[1:]])
    return out


class Pipeline:
    """A task on a model folder: ``pipeline(inputs, **options)`` gives transformers' outputs
    for one input, or a list of them for a list.

    Args:
        folder: the model folder (nothing is downloaded).
        batch_size: inputs per model call (each batch padded to a bucketed shape).
        dtype: ``from_pretrained``'s ``dtype``.
        options: call options used by every call (a call's own override them).
    """

    task: ClassVar[str]
    files: ClassVar[tuple[str, ...]] = ("tokenizer.json",)  # besides the model's
    model_inputs: ClassVar[tuple[str, ...]] = ("input_ids", "attention_mask", "token_type_ids")

    def __init__(
        self, folder: str | os.PathLike, *, batch_size: int = 8, dtype: Any = None, **options: Any
    ):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"pipeline: batch_size must be an int >= 1, got {batch_size!r}")
        self.folder = Path(folder)
        self.model = self.load_model(dtype)
        missing = [file for file in self.files if not (self.folder / file).is_file()]
        if missing:
            raise FileNotFoundError(
                f"pipeline({self.task!r}): {self.folder} has no {' or '.join(missing)}, which "
                f"the task reads. Fix: pass a folder saved with its preprocessing files"
            )
        self.batch_size = batch_size
        self.options = options
        self.tokenizer = self.load(Tokenizer, "tokenizer.json")

    def load_model(self, dtype: Any) -> Any:
        return from_pretrained(self.folder, dtype=dtype)

    def load(self, cls: Any, file: str) -> Any:
        """``cls.from_pretrained(folder)`` where the folder has ``file``, else None."""
        return cls.from_pretrained(self.folder) if (self.folder / file).is_file() else None

    @property
    def config(self) -> Any:
        return self.model.config

    def __call__(self, inputs: Any, **options: Any) -> Any:
        options = {**self.options, **options}
        single = self.single(inputs)
        items = [inputs] if single else list(inputs)
        results = [self.postprocess(row, **options) for row in self.run(items, options)]
        return results[0] if single else results

    def single(self, inputs: Any) -> bool:
        """Whether ``inputs`` is one input (else a list of them)."""
        return not isinstance(inputs, (list, tuple))

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Each item's ``preprocess`` extras with its row of the model's outputs, in order."""
        limit = getattr(self.config, "max_position_embeddings", None)
        for start in range(0, len(items), self.batch_size):
            rows = [self.preprocess(item) for item in items[start : start + self.batch_size]]
            arrays = [{k: v for k, v in row.items() if k in self.model_inputs} for row in rows]
            outputs = _forward(self.model, _padded(arrays, limit, self.batch_size))
            outputs = jax.tree.map(np.asarray, outputs)
            for i, row in enumerate(rows):
                yield {**row, "outputs": jax.tree.map(lambda x, i=i: x[i], outputs)}

    def preprocess(self, item: Any) -> dict[str, Any]:
        """The tokens of one text (lists; the batch pads them)."""
        return dict(self.tokenizer(item, return_tensors=None))

    def postprocess(self, row: dict[str, Any], **options: Any) -> Any:
        raise NotImplementedError

    def scores(self, logits: np.ndarray, function_to_apply: str | None) -> np.ndarray:
        """transformers' classification scores: sigmoid for one label or multi-label problems,
        none for regression, else softmax (``function_to_apply`` overrides)."""
        problem, labels = getattr(self.config, "problem_type", None), self.config.num_labels
        if function_to_apply is None:
            function_to_apply = (
                "none" if problem == "regression"
                else "sigmoid" if problem == "multi_label_classification" or labels == 1
                else "softmax"
            )  # fmt: skip
        if str(function_to_apply).lower() not in _FUNCTIONS:
            raise ValueError(
                f"pipeline({self.task!r}): function_to_apply={function_to_apply!r}. Fix: one of "
                f"{list(_FUNCTIONS)}"
            )
        return _FUNCTIONS[str(function_to_apply).lower()](logits.astype(np.float32))

    def labelled(self, scores: np.ndarray, top_k: int | None) -> list[dict[str, Any]]:
        """``[{"label", "score"}]`` best first, ``top_k`` of them (None: all)."""
        id2label = self.config.id2label
        order = np.argsort(-scores, kind="stable")[:top_k]
        return [{"label": id2label[int(i)], "score": float(scores[i])} for i in order]


class FeatureExtraction(Pipeline):
    """The last hidden state of each text, ``[1, L, H]`` nested lists (transformers'
    ``feature-extraction``; ``return_tensors=True``: a NumPy array)."""

    task = "feature-extraction"

    def load_model(self, dtype: Any) -> Any:
        model = super().load_model(dtype)
        return getattr(model, "base_model", model)

    def postprocess(self, row: dict[str, Any], *, return_tensors: bool = False) -> Any:
        hidden = row["outputs"][0][None, : len(row["input_ids"])]  # [1, L, H]
        return hidden if return_tensors else hidden.tolist()


class SentenceSimilarity(Pipeline):
    """The similarities of ``{"source_sentence": str, "sentences": [str]}`` (a list of
    floats, the Hugging Face inference API's ``sentence-similarity``) from a
    sentence-transformers folder's embeddings and ``similarity_fn_name`` (default cosine)."""

    task = "sentence-similarity"
    files = ("modules.json",)

    def load_model(self, dtype: Any) -> Any:
        return SentenceTransformer(self.folder)

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for item in items:
            source = self.model.encode(item["source_sentence"], batch_size=self.batch_size)
            others = self.model.encode(item["sentences"], batch_size=self.batch_size)
            yield {"outputs": np.asarray(self.model.similarity(source, others))[0]}

    def postprocess(self, row: dict[str, Any], **options: Any) -> list[float]:
        return row["outputs"].tolist()


class TextClassification(Pipeline):
    """``[{"label", "score"}]`` of each text (transformers' ``text-classification``: the best
    label alone unless ``top_k`` is given, then the ``top_k`` best; None: all)."""

    task = "text-classification"

    def __call__(self, inputs: Any, **options: Any) -> Any:
        result = super().__call__(inputs, **options)
        legacy = "top_k" not in {**self.options, **options}
        return [result] if isinstance(inputs, str) and legacy else result

    def postprocess(
        self, row: dict[str, Any], *, top_k: int | None | str = "", function_to_apply=None
    ) -> Any:
        scores = self.scores(row["outputs"], function_to_apply)
        if top_k == "":
            return self.labelled(scores, 1)[0]
        return self.labelled(scores, top_k)  # type: ignore[arg-type]


class FillMask(Pipeline):
    """The ``top_k`` (default 5) fillings of the mask token of each text:
    ``[{"score", "token", "token_str", "sequence"}]`` (a list per mask where there are several)."""

    task = "fill-mask"

    def postprocess(self, row: dict[str, Any], *, top_k: int = 5) -> Any:
        ids = np.asarray(row["input_ids"])
        masks = np.flatnonzero(ids == self.tokenizer.token_id("mask_token"))
        if not len(masks):
            raise ValueError(
                f"pipeline('fill-mask'): no {self.tokenizer.special_tokens['mask_token']!r} in "
                f"the text {self.tokenizer.decode(ids)!r}. Fix: put the mask token in it"
            )
        probs = _softmax(row["outputs"][masks].astype(np.float32))  # [masks, V]
        single = len(masks) == 1
        pad = self.tokenizer.pad_token_id
        result = []
        for mask, p in zip(masks, probs, strict=True):
            best = np.argsort(-p, kind="stable")[:top_k]
            fills = []
            for token in best.tolist():
                filled = np.where(np.arange(len(ids)) == mask, token, ids)
                filled = filled[filled != pad]
                fills.append({
                    "score": float(p[token]), "token": token,
                    "token_str": self.tokenizer.decode([token]),
                    "sequence": self.tokenizer.decode(filled, skip_special_tokens=single),
                })  # fmt: skip
            result.append(fills)
        return result[0] if single else result


class TokenClassification(Pipeline):
    """The labelled tokens of each text (transformers' ``token-classification``):
    ``aggregation_strategy="none"`` (default): ``{"entity", "score", "index", "word", "start",
    "end"}`` per token; ``"simple"``: adjacent tokens of one entity grouped into
    ``{"entity_group", "score", "word", "start", "end"}``. Labels in ``ignore_labels``
    (default ``["O"]``) are dropped."""

    task = "token-classification"

    def preprocess(self, item: Any) -> dict[str, Any]:
        row = super().preprocess(item)
        encoding = self.tokenizer.backend.encode(item)  # as configured by that call
        return {**row, "text": item, "offsets": encoding.offsets,
                "special": encoding.special_tokens_mask}  # fmt: skip

    def postprocess(
        self, row: dict[str, Any], *, aggregation_strategy: str = "none", ignore_labels=None
    ) -> list[dict[str, Any]]:
        if aggregation_strategy not in ("none", "simple"):
            raise NotImplementedError(
                f"pipeline('token-classification'): aggregation_strategy="
                f"{aggregation_strategy!r}. Fix: 'none' or 'simple'"
            )
        ignore = ["O"] if ignore_labels is None else ignore_labels
        scores = _softmax(row["outputs"][: len(row["input_ids"])].astype(np.float32))
        entities = []
        for index, (token, (start, end), special) in enumerate(
            zip(row["input_ids"], row["offsets"], row["special"], strict=True)
        ):
            if special:
                continue
            best = int(scores[index].argmax())
            word = self.tokenizer.convert_ids_to_tokens(token)
            if token == self.tokenizer.unk_token_id:
                word = row["text"][start:end]
            entities.append({"entity": self.config.id2label[best], "score": scores[index, best],
                             "index": index, "word": word, "start": start, "end": end})  # fmt: skip
        if aggregation_strategy == "simple":
            entities = [self.grouped(group) for group in _groups(entities)]
        key = "entity" if aggregation_strategy == "none" else "entity_group"
        return [entity for entity in entities if entity[key] not in ignore]

    def grouped(self, entities: list[dict[str, Any]]) -> dict[str, Any]:
        """transformers' ``group_sub_entities``: one entity of adjacent tokens."""
        decoder = self.tokenizer.backend.decoder
        tokens = [entity["word"] for entity in entities]
        return {
            "entity_group": entities[0]["entity"].split("-", 1)[-1],
            "score": np.float32(np.mean([entity["score"] for entity in entities])),
            "word": decoder.decode(tokens) if decoder else " ".join(tokens),
            "start": entities[0]["start"],
            "end": entities[-1]["end"],
        }


def _tag(entity: str) -> tuple[str, str]:
    """``("B"|"I", tag)`` of a label (one without a prefix counts as "I")."""
    return (entity[0], entity[2:]) if entity[:2] in ("B-", "I-") else ("I", entity)


def _groups(entities: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Runs of tokens of one tag, each opened by a "B-" or a change of tag."""
    group: list[dict[str, Any]] = []
    for entity in entities:
        bi, tag = _tag(entity["entity"])
        if group and (tag != _tag(group[-1]["entity"])[1] or bi == "B"):
            yield group
            group = []
        group.append(entity)
    if group:
        yield group


class ImageClassification(Pipeline):
    """The ``top_k`` (default 5) ``[{"label", "score"}]`` of each image (a PIL image or a
    uint8 ``[H, W, C]`` array), through the folder's ``preprocessor_config.json``."""

    task = "image-classification"
    files = ("preprocessor_config.json",)
    model_inputs = ("pixel_values",)

    def __init__(self, folder: str | os.PathLike, **options: Any):
        super().__init__(folder, **options)
        self.processor = ImageProcessor.from_pretrained(self.folder)

    def preprocess(self, item: Any) -> dict[str, Any]:
        return {"pixel_values": self.processor(item)["pixel_values"][0]}

    def postprocess(self, row: dict[str, Any], *, top_k: int = 5, function_to_apply=None) -> Any:
        return self.labelled(self.scores(row["outputs"], function_to_apply), top_k)


class ZeroShotImageClassification(ImageClassification):
    """``[{"score", "label"}]`` of each image against ``candidate_labels`` written into
    ``hypothesis_template`` (CLIP: softmax over the labels; SigLIP: each label's sigmoid),
    best first. One model call per image (its texts are the batch)."""

    task = "zero-shot-image-classification"
    files = ("preprocessor_config.json", "tokenizer.json")
    model_inputs = ("pixel_values", "input_ids", "attention_mask")

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        labels = options.get("candidate_labels")
        if not labels:
            raise ValueError(
                "pipeline('zero-shot-image-classification'): no candidate_labels. Fix: pass "
                "candidate_labels=['a cat', ...]"
            )
        template = options.get("hypothesis_template", "This is a photo of {}.")
        texts = [template.format(label) for label in labels]
        siglip = "siglip" in self.config.model_type
        padding = {"padding": "max_length", "max_length": 64, "truncation": True} if siglip else {}
        tokens = self.tokenizer(texts, **(padding or {"padding": True}))
        for item in items:
            inputs = {**tokens, "pixel_values": self.preprocess(item)["pixel_values"][None]}
            names = [k for k in self.model_inputs if k in inputs]
            outputs = _forward(self.model, {k: inputs[k] for k in names})
            yield {"labels": labels, "outputs": np.asarray(outputs[0])[0], "siglip": siglip}

    def postprocess(self, row: dict[str, Any], **options: Any) -> Any:
        logits = row["outputs"].astype(np.float32)  # [labels]
        scores = _sigmoid(logits) if row["siglip"] else _softmax(logits)
        order = sorted(zip(scores.tolist(), row["labels"], strict=True), key=lambda x: -x[0])
        return [{"score": score, "label": label} for score, label in order]


# transformers' text-generation pipeline defaults, for what neither the call nor the folder's
# generation_config.json sets.
# (GenerationConfig's top_k=50 among them; js.models.generate's own default is no limit).
_GENERATION_DEFAULTS = {"max_new_tokens": 256, "do_sample": True, "temperature": 0.7, "top_k": 50}
_SAMPLING = ("temperature", "top_k")


class TextGeneration(Pipeline):
    """``[{"generated_text"}]`` for each prompt: a string, or chat messages (``[{"role",
    "content"}]``) rendered with the folder's chat template, the reply appended as an assistant
    message. ``return_full_text`` (default True) keeps the prompt; ``seed`` (default 0) seeds
    sampling; the other options are ``generate``'s, where neither they nor the folder's
    generation config say, transformers' pipeline defaults: ``max_new_tokens=256``,
    ``do_sample=True``, ``temperature=0.7``, ``top_k=50``. Prompts of a batch are left-padded."""

    task = "text-generation"

    def single(self, inputs: Any) -> bool:
        return super().single(inputs) or bool(inputs) and isinstance(inputs[0], dict)  # a chat

    def __call__(self, inputs: Any, **options: Any) -> Any:
        result = super().__call__(inputs, **options)
        return [result] if self.single(inputs) else [[r] for r in result]

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        keep = ("return_full_text", "skip_special_tokens")
        settings = {k: v for k, v in options.items() if k not in keep}
        seed = settings.pop("seed", 0)
        folder = self.model.generation_config
        blocked = {*folder, *(["max_new_tokens"] if "max_length" in settings else [])}
        defaults = {k: v for k, v in _GENERATION_DEFAULTS.items() if k not in blocked}
        settings = {**defaults, **settings}
        if settings.get("do_sample", folder.get("do_sample")):
            settings["rngs"] = js.Rngs(sample=seed)
        else:  # transformers drops its sampling defaults when not sampling
            settings = {k: v for k, v in settings.items() if k in options or k not in _SAMPLING}
        pad = self.tokenizer.pad_token_id or 0
        for start in range(0, len(items), self.batch_size):
            prompts = items[start : start + self.batch_size]
            rows = [self.preprocess(prompt)["input_ids"] for prompt in prompts]
            width = max(map(len, rows))
            ids = np.array([[pad] * (width - len(r)) + r for r in rows], np.int32)
            mask = np.array([[0] * (width - len(r)) + [1] * len(r) for r in rows], np.int32)
            out = np.asarray(generate(self.model, ids, attention_mask=mask, **settings))
            for prompt, tokens in zip(prompts, out[:, width:], strict=True):
                yield {"prompt": prompt, "new": tokens}

    def preprocess(self, item: Any) -> dict[str, Any]:
        if isinstance(item, str):
            return dict(self.tokenizer(item, return_tensors=None))
        final = item[-1]["role"] == "assistant"
        return self.tokenizer.apply_chat_template(
            item, add_generation_prompt=not final, continue_final_message=final
        )

    def postprocess(
        self, row: dict[str, Any], *, return_full_text: bool = True, skip_special_tokens=True,
        **options: Any,
    ) -> Any:  # fmt: skip
        text = self.tokenizer.decode(row["new"], skip_special_tokens=skip_special_tokens)
        prompt = row["prompt"]
        if not return_full_text:
            return {"generated_text": text}
        if isinstance(prompt, str):
            return {"generated_text": prompt + text}
        if prompt[-1]["role"] == "assistant":
            last = {**prompt[-1], "content": prompt[-1]["content"] + text}
            return {"generated_text": [*prompt[:-1], last]}
        return {"generated_text": [*prompt, {"role": "assistant", "content": text}]}


TASKS: dict[str, type[Pipeline]] = {
    cls.task: cls
    for cls in (
        FeatureExtraction, SentenceSimilarity, TextClassification, FillMask, TokenClassification,
        ImageClassification, ZeroShotImageClassification, TextGeneration,
    )
}  # fmt: skip
TASKS["sentiment-analysis"] = TextClassification  # transformers' aliases
TASKS["ner"] = TokenClassification


def pipeline(task: str, folder: str | os.PathLike, **options: Any) -> Pipeline:
    """A task's pipeline on a local model folder, as transformers' ``pipeline(task, model)``.

    Args:
        task: one of ``TASKS`` (transformers' names: ``"text-classification"``, ``"fill-mask"``,
            ``"token-classification"``, ``"feature-extraction"``, ``"sentence-similarity"``
            (a sentence-transformers folder), ``"image-classification"``,
            ``"zero-shot-image-classification"``, ``"text-generation"``).
        folder: the model folder (``config.json``, weights, tokenizer or preprocessor files).
        options: ``batch_size`` (default 8), ``dtype``, and call options every call uses
            (``top_k``, ``max_new_tokens``...).

    Returns:
        The ``Pipeline``: call it with an input or a list of inputs.

    Example:
        >>> classify = js.models.pipeline("text-classification", "folder")  # doctest: +SKIP
        >>> classify("a fine day")  # doctest: +SKIP
        [{'label': 'POSITIVE', 'score': 0.98}]
    """
    if task not in TASKS:
        raise KeyError(f"js.models.pipeline: unknown task {task!r}. Fix: one of {sorted(TASKS)}")
    return TASKS[task](folder, **options)
