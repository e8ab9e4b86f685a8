"""Sentence embeddings from sentence-transformers folders, as sentence-transformers 6.3
computes them: ``SentenceTransformer(folder).encode(...)``.

A sentence-transformers folder lists its pipeline in ``modules.json``, each entry a module type
and its subfolder. js.models reads the four modules of a text embedding model
(``_sentence_modules.py``):

- ``Transformer`` (usually the folder's root): the model folder ``js.models.from_pretrained``
  loads (any family; a head model's base model, as sentence-transformers' ``AutoModel`` takes),
  ``sentence_bert_config.json`` (``max_seq_length``, ``do_lower_case``) and the tokenizer files.
  It adds the last hidden state, ``token_embeddings``;
- ``Pooling`` (``1_Pooling/config.json``): ``sentence_embedding`` from the token states by
  mean, [CLS], max, mean over sqrt(length), position-weighted mean or last token;
- ``Dense`` (``config.json`` and ``model.safetensors``): ``activation(linear(x))``;
- ``Normalize``: ``x / max(||x||, 1e-12)``.

Each module reads and extends one ``features`` dict, as sentence-transformers' modules do, so
``SentenceTransformer`` is an ``nn.Sequential`` of them. Each keeps its config file (the
Transformer also its tokenizer files) as read and writes it back in ``save_pretrained`` beside
js's weights, so sentence-transformers reads the saved folder. Text goes through
``tokenizer.json`` with the ``tokenizers`` library (``_text_tokenizer.py``); token ids can be
given instead. ``encode`` runs one compiled program (``js.jit``) per batch shape: each batch
is padded with masked-out zeros to a power-of-two number of rows (at most ``batch_size``) and
of tokens (at least 8, at most ``max_seq_length``), so that a few programs serve every call and
a second call of the same shapes compiles nothing.
"""

from __future__ import annotations

import collections
import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import jax
import jax.numpy as jnp
import numpy as np

import js
from js import nn

from ._base import PretrainedConfig
from ._sentence_modules import (
    MODULES,
    POOLING_MODES,
    TOKEN_INPUTS,
    Dense,
    Normalize,
    Pooling,
    Transformer,
    normalized,
    pooling_modes,
    read_json,
    required,
    write_json,
)
from ._text_tokenizer import TextTokenizer


def _dot(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.matmul(a, b.T, precision=jax.lax.Precision.HIGHEST)  # float32, as torch's


def _distances(a: jax.Array, b: jax.Array) -> jax.Array:
    return a[:, None, :] - b[None, :, :]  # [N, M, D]


_SIMILARITIES: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    "cosine": lambda a, b: _dot(normalized(a), normalized(b)),
    "dot": _dot,
    "euclidean": lambda a, b: -jnp.sqrt(jnp.sum(_distances(a, b) ** 2, axis=-1)),
    "manhattan": lambda a, b: -jnp.sum(jnp.abs(_distances(a, b)), axis=-1),
}


def _modules_json(folder: Path) -> list[tuple[str, str, str]]:
    """``modules.json``'s ``(name, path, type)`` rows in ``idx`` order, checked."""
    fix = "pass the folder SentenceTransformer.save wrote (a transformers folder: from_pretrained)"
    file = required(folder / "modules.json", "SentenceTransformer", fix)
    entries = sorted(read_json(file), key=lambda entry: entry.get("idx", 0))
    rows = [(str(e["name"]), str(e["path"]), str(e["type"])) for e in entries]
    for _, path, kind in rows:
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise ValueError(f"SentenceTransformer: {file} names the path {path!r} outside it")
        if kind.rsplit(".", 1)[-1] not in MODULES:
            raise NotImplementedError(
                f"SentenceTransformer: {file} lists a {kind!r} module, which js.models does not "
                f"implement; it reads {list(MODULES)}"
            )
    if not rows or not rows[0][2].endswith("Transformer"):
        raise ValueError(
            f"SentenceTransformer: {file} must start with a Transformer module (the one that "
            f"reads tokens), got {[kind for _, _, kind in rows]}"
        )
    return rows


def _token_features(inputs: Any) -> dict[str, Any]:
    """``encode``'s token inputs (an ids array ``[N, L]`` or a dict of them) as NumPy arrays."""
    given = dict(inputs) if isinstance(inputs, Mapping) else {"input_ids": inputs}
    unknown = sorted(set(given) - {*TOKEN_INPUTS, "prompt_length"})
    ids = np.asarray(given.get("input_ids"))
    if unknown or ids.ndim != 2:
        raise ValueError(
            f"SentenceTransformer.encode: token inputs are input_ids [N, L] (and optionally "
            f"attention_mask, token_type_ids [N, L], prompt_length), got keys {sorted(given)} "
            f"and input_ids of shape {list(ids.shape)}. Fix: pass the tokenizer's arrays"
        )
    features = {name: np.asarray(given[name]) for name in TOKEN_INPUTS if name in given}
    features.setdefault("attention_mask", np.ones_like(ids))
    wrong = {k: list(v.shape) for k, v in features.items() if v.shape != ids.shape}
    if wrong:
        raise ValueError(f"SentenceTransformer.encode: {wrong} must have input_ids' shape")
    return {**features, **{k: int(v) for k, v in given.items() if k == "prompt_length"}}


def _bucket(size: int, limit: int | None, floor: int = 1) -> int:
    """``size`` rounded up to a power of two (at least ``floor``), at most ``limit``, never below
    ``size``: batches of a few shapes, each compiling its operations once."""
    rounded = max(floor, 1 << (size - 1).bit_length())
    return max(size, min(rounded, limit or rounded))


def _padded(value: Any, shape: tuple[int, int]) -> Any:
    """A token feature ``[b, L]`` padded with zeros (masked out) after its rows and columns to
    ``shape``; padding after the tokens changes no row's embedding (``prompt_length`` kept)."""
    if np.ndim(value) != 2:
        return value
    return np.pad(value, [(0, shape[0] - value.shape[0]), (0, shape[1] - value.shape[1])])


# Programs ``_embed`` traced, by the tests: a second encode of the same shapes adds none.
TRACES: collections.Counter[str] = collections.Counter()


@functools.partial(js.jit, static_argnames=("size", "normalize"))
def _embed(model: nn.Module, features: dict[str, jax.Array], *, size, normalize) -> jax.Array:
    """``sentence_embedding`` ``[B, D]`` of one padded batch, cut to ``size`` (None: all of
    ``D``) and with ``normalize`` scaled to unit length: one program per batch shape."""
    TRACES["encode"] += 1
    embeddings = model(features)["sentence_embedding"][:, :size]
    return normalized(embeddings) if normalize else embeddings


class SentenceTransformer(nn.Sequential):
    """A sentence-transformers model folder: its modules (``modules.json``) applied in order to
    a ``features`` dict, ``forward(features)["sentence_embedding"]`` ``[B, D]``, with
    ``encode`` (text or token ids -> NumPy embeddings) and ``similarity``.

    Args:
        path: the folder (``modules.json``, ``config_sentence_transformers.json``, the modules'
            folders); nothing is downloaded.

    Shape:
        ``input_ids``, ``attention_mask``, ``token_type_ids`` ``[B, L]`` ->
        ``sentence_embedding`` ``[B, D]``.

    Example:
        >>> model = js.models.SentenceTransformer("all-MiniLM-L6-v2")  # doctest: +SKIP
        >>> cat, others = model.encode("a cat"), model.encode(["a dog", "tax"])  # doctest: +SKIP
        >>> model.similarity(cat, others).shape  # doctest: +SKIP
        (1, 2)
    """

    def __init__(self, path: str | os.PathLike):
        folder = Path(path)
        rows = _modules_json(folder)
        loaded = [MODULES[kind.rsplit(".", 1)[-1]].load(folder / sub) for _, sub, kind in rows]
        super().__init__(*loaded)
        self.modules_json = tuple(rows)
        file = folder / "config_sentence_transformers.json"
        self.config = PretrainedConfig(**(read_json(file) if file.is_file() else {}))
        self.eval()

    @property
    def transformer(self) -> Transformer:
        """The first module, the one that reads tokens."""
        module = self[0]
        assert isinstance(module, Transformer)  # _modules_json checked modules.json
        return module

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> Self:
        """The model of a sentence-transformers folder (as ``SentenceTransformer(path)``)."""
        return cls(path)

    @property
    def similarity_fn_name(self) -> str:
        """``similarity``'s function: the folder's ``similarity_fn_name``, else cosine."""
        name = getattr(self.config, "similarity_fn_name", None)
        return name if name in _SIMILARITIES else "cosine"

    @similarity_fn_name.setter
    def similarity_fn_name(self, name: str) -> None:
        if name not in _SIMILARITIES:
            raise ValueError(
                f"SentenceTransformer: similarity_fn_name must be one of {list(_SIMILARITIES)}, "
                f"got {name!r}"
            )
        self.config.similarity_fn_name = name

    def similarity(self, a: Any, b: Any) -> jax.Array:
        """Scores ``[N, M]`` of embeddings ``a`` ``[N, D]`` against ``b`` ``[M, D]`` (or ``[D]``
        each): cosine, dot, or the negated euclidean or manhattan distance."""
        a, b = jnp.atleast_2d(jnp.asarray(a)), jnp.atleast_2d(jnp.asarray(b))
        return _SIMILARITIES[self.similarity_fn_name](a, b)

    def encode(
        self,
        inputs: str | Sequence[str] | Mapping[str, Any] | Any,
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        normalize_embeddings: bool = False,
    ) -> np.ndarray:
        """Embeddings of texts or token ids, as sentence-transformers' ``encode`` (its
        parameters' order).

        Args:
            inputs: a text or a list of texts (tokenized with the folder's ``tokenizer.json``),
                or token ids: an ``input_ids`` array ``[N, L]`` or a dict of ``input_ids``,
                ``attention_mask``, ``token_type_ids`` ``[N, L]`` and ``prompt_length``.
            prompt_name: a key of the folder's ``prompts`` (default: its
                ``default_prompt_name``); ``prompt``: a text instead. Put before each text.
            batch_size: rows per forward pass (texts are batched longest first).
            normalize_embeddings: scale each embedding to unit length.

        Returns:
            float32 ``[N, D]`` (``[D]`` for one text), cut to the folder's ``truncate_dim``.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"SentenceTransformer.encode: batch_size must be >= 1, got {batch_size!r}"
            )
        size = getattr(self.config, "truncate_dim", None)
        parts, orders = [], []
        for rows, features in self._batches(inputs, batch_size, prompt, prompt_name):
            count, length = features["input_ids"].shape
            shape = _bucket(count, batch_size), _bucket(length, self.transformer.max_seq_length, 8)
            padded = {key: jnp.asarray(_padded(value, shape)) for key, value in features.items()}
            embeddings = _embed(self, padded, size=size, normalize=normalize_embeddings)
            parts.append(np.asarray(embeddings)[:count])  # [b, D]: the padding rows dropped
            orders.append(rows)
        if not parts:
            return np.zeros((0,), np.float32)
        embeddings = np.empty_like(np.concatenate(parts))
        embeddings[np.concatenate(orders)] = np.concatenate(parts)
        return embeddings[0] if isinstance(inputs, str) else embeddings

    def _batches(
        self, inputs: Any, size: int, prompt: str | None, prompt_name: str | None
    ) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
        """``(row indices, features)`` per batch of ``inputs``."""
        if isinstance(inputs, Mapping) or hasattr(inputs, "shape"):
            if prompt is not None or prompt_name is not None:
                raise ValueError(
                    "SentenceTransformer.encode: prompt and prompt_name are text, and the "
                    "inputs are token ids. Fix: tokenize the prompt with the texts and pass "
                    "prompt_length (its token count) with them"
                )
            features = _token_features(inputs)
            count = len(features["input_ids"])
            for start in range(0, count, size):
                rows = np.arange(start, min(start + size, count))
                yield rows, {k: v if k == "prompt_length" else v[rows] for k, v in features.items()}
            return
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        prompt = self._prompt(prompt, prompt_name)
        tokenizer = self.transformer.tokenizer
        extra = {"prompt_length": tokenizer.prompt_length(prompt)} if prompt else {}
        texts = [(prompt or "") + text for text in texts]
        order = np.argsort([-len(text) for text in texts], kind="stable")
        for start in range(0, len(texts), size):
            rows = order[start : start + size]
            yield rows, {**tokenizer([texts[i] for i in rows]), **extra}

    def _prompt(self, prompt: str | None, prompt_name: str | None) -> str | None:
        """The prompt text: ``prompt``, else the folder's prompt of that name (or its default)."""
        prompts = getattr(self.config, "prompts", None) or {}
        if prompt is not None or prompt_name is None:
            default = getattr(self.config, "default_prompt_name", None)
            return prompt if prompt is not None else prompts.get(default)
        if prompt_name not in prompts:
            raise ValueError(
                f"SentenceTransformer.encode: prompt_name {prompt_name!r} is not one of the "
                f"folder's prompts {sorted(prompts)} (config_sentence_transformers.json)"
            )
        return prompts[prompt_name]

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write a sentence-transformers folder: each module's folder (the configs and
        tokenizer files as read, js's weights), ``modules.json`` and
        ``config_sentence_transformers.json``."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        for module, (_, sub, _) in zip(self, self.modules_json, strict=True):
            module.save(folder / sub)
        rows = [
            {"idx": i, "name": n, "path": p, "type": t}
            for i, (n, p, t) in enumerate(self.modules_json)
        ]
        write_json(folder / "modules.json", rows)
        settings = {**self.config.to_dict(), "similarity_fn_name": self.similarity_fn_name}
        write_json(folder / "config_sentence_transformers.json", settings)


__all__ = [
    "POOLING_MODES",
    "Dense",
    "Normalize",
    "Pooling",
    "SentenceTransformer",
    "TextTokenizer",
    "Transformer",
    "pooling_modes",
]
