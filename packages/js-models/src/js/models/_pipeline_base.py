"""The base of ``js.models.pipeline``'s tasks: a ``Pipeline`` batches its inputs, pads each batch
to a bucketed shape and runs the model through one compiled program per padded shape.

A task is a small subclass: ``preprocess`` turns one input into arrays, ``postprocess`` turns
one row of the model's outputs into transformers' result (the same keys, labels from
``id2label``, scores as transformers computes them). Inputs are taken ``batch_size`` at a time,
each batch padded (masked-out zeros after the rows and the tokens) to a power-of-two number of
rows and of tokens, and run by ``js.jit`` once per padded shape, so a stream of requests of any
lengths compiles a bounded number of programs (``TRACES`` counts them). A task declares
``aliases`` (transformers' other names for it); each module of tasks lists its classes in
``PIPELINES``.
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

from ._pretrained import from_pretrained
from .sentence_transformers import _bucket
from .tokenizer import Tokenizer

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
    aliases: ClassVar[tuple[str, ...]] = ()  # transformers' other names for the task
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
