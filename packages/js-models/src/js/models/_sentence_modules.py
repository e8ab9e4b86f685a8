"""The modules of a sentence-transformers folder that js.models reads (``SentenceTransformer``
applies them in order): ``Transformer``, ``Pooling``, ``Dense`` and ``Normalize``, each a js
module whose ``forward(features) -> features`` reads the keys sentence-transformers' module reads
and adds the one it adds, and whose ``load(folder)``/``save(folder)`` read and write its
sentence-transformers folder (its config file kept as read, the weights js's).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

import jax
import jax.numpy as jnp

from js import Rngs, nn

from ._base import PretrainedConfig, PreTrainedModel
from ._pretrained import from_pretrained, loading_info
from ._text_tokenizer import TextTokenizer

_LOG = logging.getLogger("js.models")
# Files js writes itself (weights, the model's config.json) or that describe the whole folder;
# the Transformer module keeps every other file of its folder (the tokenizer's) as read.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack", ".ot", ".onnx", ".index.json")
_FOLDER_FILES = ("config.json", "modules.json", "config_sentence_transformers.json", "README.md")
# The Transformer module's config; releases before 2.0 named it after the family.
_TRANSFORMER_CONFIGS = tuple(
    f"sentence_{family}_config.json"
    for family in ("bert", "roberta", "distilbert", "camembert", "albert", "xlm-roberta", "xlnet")
)
_UNLIMITED = int(1e30)  # transformers' VERY_LARGE_INTEGER: a tokenizer without a length limit
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"SentenceTransformer: {file} is not valid JSON ({error})") from None


def required(file: Path, owner: str, fix: str) -> Path:
    """``file``, or a FileNotFoundError saying that ``owner`` needs it, and ``fix``."""
    if not file.is_file():
        raise FileNotFoundError(f"{owner}: {file.parent} has no {file.name}. Fix: {fix}")
    return file


def write_json(file: Path, value: Any) -> None:
    file.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def normalized(x: jax.Array) -> jax.Array:
    """``x / max(||x||, 1e-12)`` along the last axis (``torch.nn.functional.normalize``)."""
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


# ---------------------------------------------------------------------------------------------
# Pooling: token states [B, L, H] and the float mask [B, L] -> [B, H]. ``starts`` [B] is each
# row's first token, the length of its left padding.


def _masked_sum(hidden: jax.Array, weights: jax.Array) -> jax.Array:
    return (hidden * weights[..., None]).sum(axis=1)


def _count(weights: jax.Array) -> jax.Array:
    return jnp.maximum(weights.sum(axis=1, keepdims=True), 1e-9)  # [B, 1]


def _pick(hidden: jax.Array, index: jax.Array) -> jax.Array:
    return jnp.take_along_axis(hidden, index[:, None, None], axis=1)[:, 0]


def _weighted_mean(hidden: jax.Array, mask: jax.Array, starts: jax.Array) -> jax.Array:
    weights = mask * (jnp.arange(1, mask.shape[1] + 1) - starts[:, None])  # 1, 2, ... per row
    return _masked_sum(hidden, weights) / _count(weights)


def _last_token(hidden: jax.Array, mask: jax.Array, starts: jax.Array) -> jax.Array:
    last = mask.shape[1] - 1 - jnp.argmax(mask[:, ::-1], axis=1)  # the last position kept
    return _pick(hidden * mask[..., None], last)


_POOLERS: dict[str, Callable[[jax.Array, jax.Array, jax.Array], jax.Array]] = {
    "cls": lambda hidden, mask, starts: _pick(hidden, jnp.argmax(mask, axis=1)),
    "max": lambda hidden, mask, starts: jnp.where(mask[..., None] > 0, hidden, -jnp.inf).max(1),
    "mean": lambda hidden, mask, starts: _masked_sum(hidden, mask) / _count(mask),
    "mean_sqrt_len_tokens": lambda hidden, mask, starts: (
        _masked_sum(hidden, mask) / jnp.sqrt(_count(mask))
    ),
    "weightedmean": _weighted_mean,
    "lasttoken": _last_token,
}
POOLING_MODES = tuple(_POOLERS)
# sentence-transformers < 6's config keys, one flag per mode (in its concatenation order)
_LEGACY_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def pooling_modes(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The modes of a Pooling config, in their concatenation order: ``pooling_mode`` (a name or
    a list), else the older ``pooling_mode_*`` flags, else mean."""
    mode = config.get("pooling_mode")
    if mode is None:
        mode = tuple(name for key, name in _LEGACY_MODES.items() if config.get(key)) or "mean"
    modes = (mode,) if isinstance(mode, str) else tuple(mode)
    unknown = [name for name in modes if name not in _POOLERS]
    if unknown:
        raise ValueError(
            f"Pooling: pooling modes {unknown} are not sentence-transformers'; it has "
            f"{list(POOLING_MODES)}. Fix: set pooling_mode in the Pooling folder's config.json"
        )
    return modes


# ---------------------------------------------------------------------------------------------
# The modules


class _Stage(nn.Module):
    """A module of the pipeline: ``forward(features) -> features`` with its key added, and its
    config file kept as read (``config``), written back by ``save``."""

    config_name: ClassVar[str] = "config.json"

    def __init__(self, config: Mapping[str, Any]):
        super().__init__()
        self.config = PretrainedConfig(**config)

    @classmethod
    def load(cls, folder: Path) -> Self:
        """The module of a sentence-transformers module folder."""
        file = folder / cls.config_name
        return cls(read_json(file) if file.is_file() else {})

    def save(self, folder: Path) -> None:
        """Write the module's folder as sentence-transformers writes it."""
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / self.config_name, self.config.to_dict())


class _FeatureMap(_Stage):
    """A module that maps one feature (``module_input_name``, default ``sentence_embedding``)
    to ``module_output_name`` (default: in place) with ``apply``."""

    def __init__(self, config: Mapping[str, Any]):
        super().__init__(config)
        self.input_name = config.get("module_input_name") or "sentence_embedding"
        self.output_name = config.get("module_output_name") or self.input_name

    def apply(self, x: jax.Array) -> jax.Array:
        raise NotImplementedError

    def forward(self, features: Mapping[str, Any]) -> dict[str, Any]:
        return {**features, self.output_name: self.apply(features[self.input_name])}


class Pooling(_Stage):
    """``token_embeddings`` ``[B, L, H]`` -> ``sentence_embedding`` ``[B, H * len(modes)]``:
    each mode of ``pooling_mode`` over the tokens ``attention_mask`` keeps, concatenated.

    With ``include_prompt: false`` and a ``prompt_length`` feature, the prompt's tokens (and
    the special tokens before them) are left out, as sentence-transformers does.

    Example:
        >>> import jax.numpy as jnp
        >>> hidden = jnp.arange(12.0).reshape(1, 3, 4)  # [B=1, L=3, H=4], the last is padding
        >>> pool = Pooling({"pooling_mode": ["lasttoken", "cls"]})
        >>> pool({"token_embeddings": hidden, "attention_mask": jnp.array([[1, 1, 0]])})[
        ...     "sentence_embedding"].tolist()
        [[4.0, 5.0, 6.0, 7.0, 0.0, 1.0, 2.0, 3.0]]
    """

    def __init__(self, config: Mapping[str, Any]):
        super().__init__(config)
        self.modes = pooling_modes(config)
        self.include_prompt = bool(config.get("include_prompt", True))

    def forward(self, features: Mapping[str, Any]) -> dict[str, Any]:
        hidden = features["token_embeddings"]  # [B, L, H]
        given = features.get("attention_mask")
        mask = jnp.ones(hidden.shape[:2]) if given is None else jnp.asarray(given)
        mask = mask.astype(hidden.dtype)  # [B, L]
        starts = jnp.argmax(mask, axis=1)  # [B]
        if not self.include_prompt and "prompt_length" in features:
            prompt_end = starts + features["prompt_length"]  # [B]
            mask = jnp.where(jnp.arange(mask.shape[1]) < prompt_end[:, None], 0, mask)
        pooled = [_POOLERS[mode](hidden, mask, starts) for mode in self.modes]
        return {**features, "sentence_embedding": jnp.concatenate(pooled, axis=-1)}


class Normalize(_FeatureMap):
    """The feature scaled to unit L2 length: ``x / max(||x||, 1e-12)``."""

    def apply(self, x: jax.Array) -> jax.Array:
        return normalized(x)


# torch.nn activations a Dense config may name; js.nn has each under the same name.
_TORCH_ACTIVATIONS = (
    "ELU",
    "GELU",
    "Hardtanh",
    "Identity",
    "LeakyReLU",
    "ReLU",
    "ReLU6",
    "SiLU",
    "Sigmoid",
    "Tanh",
)


def _activation(path: str | None) -> nn.Module:
    """js.nn's module for a Dense config's ``activation_function`` (a torch class path)."""
    if path is None:
        return nn.Tanh()  # sentence-transformers' default
    if not path.startswith("torch."):
        _LOG.warning(
            "Dense: activation_function %r is not a torch.nn class; sentence-transformers "
            "(without trust_remote_code) uses Tanh instead, and so does js.models",
            path,
        )
        return nn.Tanh()
    name = path.rsplit(".", 1)[-1]
    if name not in _TORCH_ACTIVATIONS:
        raise NotImplementedError(
            f"Dense: activation_function {path!r} is not one js.models implements; it knows "
            f"torch.nn's {list(_TORCH_ACTIVATIONS)} (default arguments). Fix: use one of them"
        )
    return getattr(nn, name)()


class Dense(_FeatureMap):
    """``activation_function(linear(x))`` (plus ``x``, or ``residual(x)`` when the sizes
    differ, with ``use_residual``); ``linear`` ``[out_features, in_features]``."""

    def __init__(self, config: Mapping[str, Any], *, rngs: Rngs):
        super().__init__(config)
        size_in, size_out = config["in_features"], config["out_features"]
        self.linear = nn.Linear(size_in, size_out, bool(config.get("bias", True)), rngs=rngs)
        self.activation_function = _activation(config.get("activation_function"))
        self.use_residual = bool(config.get("use_residual", False))
        project = self.use_residual and size_in != size_out
        self.residual = nn.Linear(size_in, size_out, False, rngs=rngs) if project else None

    @classmethod
    def load(cls, folder: Path) -> Self:
        fix = "save it with sentence-transformers (js reads safetensors, not pytorch_model.bin)"
        weights = required(folder / "model.safetensors", "Dense", fix)
        dense = cls(read_json(folder / cls.config_name), rngs=Rngs(params=0))
        nn.load_weights(dense, weights, layout="torch")
        return dense

    def apply(self, x: jax.Array) -> jax.Array:
        out = self.activation_function(self.linear(x))
        if not self.use_residual:
            return out
        return out + (x if self.residual is None else self.residual(x))

    def save(self, folder: Path) -> None:
        super().save(folder)
        nn.save_weights(self, folder / "model.safetensors", layout="torch")


def _encoder(folder: Path) -> Any:
    """js.models' model of the Transformer module's folder, as sentence-transformers' AutoModel
    loads it: a head model's base model, and a pooler the folder lacks left at its initial
    values (transformers does the same; the Pooling module never reads it)."""
    model = from_pretrained(folder, strict=False)
    info = loading_info(model)
    missing = [key for key in info.missing_keys if ".pooler." not in f".{key}"]
    if missing or info.unexpected_keys:
        raise ValueError(
            f"SentenceTransformer: {folder} does not hold the model its config.json describes: "
            f"missing {missing}, unexpected {info.unexpected_keys}. Fix: save the model again "
            "with transformers' or js's save_pretrained"
        )
    return getattr(model, "base_model", model)


def _max_seq_length(
    config: Mapping[str, Any], settings: Mapping[str, Any], model: Any
) -> int | None:
    """sentence-transformers' rule: ``max_seq_length`` (or ``model_max_length`` in the module's
    processor arguments) as given; else the tokenizer's ``model_max_length`` capped at the
    model's ``max_position_embeddings``."""
    options = config.get("processor_kwargs") or config.get("tokenizer_args") or {}
    given = options.get("model_max_length", config.get("max_seq_length"))
    if given is not None:
        return int(given)
    limit = settings.get("model_max_length", _UNLIMITED)
    positions = getattr(model.config, "max_position_embeddings", -1)
    limit = limit if positions == -1 else min(limit, positions)
    return None if limit >= _UNLIMITED else int(limit)


class Transformer(_Stage):
    """The encoder: a js.models model whose last hidden state becomes ``token_embeddings``
    ``[B, L, H]``, with its ``tokenizer`` and ``sentence_bert_config.json`` (``config``).

    Args:
        model: the model (called with the features it takes of ``input_ids``,
            ``attention_mask`` and ``token_type_ids``).
        config: ``sentence_bert_config.json``'s keys.
        tokenizer: the folder's ``TextTokenizer``.
    """

    config_name = "sentence_bert_config.json"

    def __init__(self, model: PreTrainedModel, config: Mapping[str, Any], tokenizer: TextTokenizer):
        super().__init__(config)
        self.model = model
        self.tokenizer = tokenizer
        takes = inspect.signature(model.forward).parameters
        self.input_names = tuple(name for name in TOKEN_INPUTS if name in takes)

    @property
    def max_seq_length(self) -> int | None:
        """The tokenizer's truncation length (None: no limit)."""
        return self.tokenizer.max_length

    @classmethod
    def load(cls, folder: Path) -> Self:
        names = [name for name in _TRANSFORMER_CONFIGS if (folder / name).is_file()]
        config = read_json(folder / names[0]) if names else {}
        skip = (*_FOLDER_FILES, *_TRANSFORMER_CONFIGS)
        files = {
            file.name: file.read_bytes()
            for file in sorted(folder.iterdir())
            if file.is_file() and file.name not in skip and not file.name.endswith(_WEIGHT_SUFFIXES)
        }
        model = _encoder(folder)
        tokenizer = TextTokenizer(files, None, bool(config.get("do_lower_case", False)))
        tokenizer.max_length = _max_seq_length(config, tokenizer.settings(), model)
        return cls(model, config, tokenizer)

    def forward(self, features: Mapping[str, Any]) -> dict[str, Any]:
        out = self.model(**{name: features[name] for name in self.input_names if name in features})
        hidden = out[0] if isinstance(out, tuple) else out  # [B, L, H]
        return {**features, "token_embeddings": hidden}

    def save(self, folder: Path) -> None:
        self.model.save_pretrained(folder)  # config.json and model.safetensors
        self.tokenizer.save(folder)
        super().save(folder)


MODULES: dict[str, type[_Stage]] = {
    "Transformer": Transformer,
    "Pooling": Pooling,
    "Dense": Dense,
    "Normalize": Normalize,
}


__all__ = ["POOLING_MODES", "Dense", "Normalize", "Pooling", "Transformer", "pooling_modes"]
