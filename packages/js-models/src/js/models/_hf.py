"""transformers' conventions the families share: activation names (``ACT2FN``, every family),
and for the encoders (BERT, ViT) the label keys of a classifier's config and multi-head
self-attention.

Labels follow ``PreTrainedConfig.__init__`` in transformers 5.23: ``id2label`` is the source of
truth (JSON's string keys become ints), ``num_labels`` is its length, and a config without
``id2label`` gets ``{i: "LABEL_i"}`` for ``num_labels`` (2 when absent).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from js import Rngs
from js.nn import functional as F

from ._base import PretrainedConfig


class LabelledConfig(PretrainedConfig):
    """A config with transformers' classifier keys: ``id2label``, ``label2id`` and the derived
    ``num_labels`` (settable, as in transformers: a new count resets the label names).

    Example:
        >>> class TinyConfig(LabelledConfig):
        ...     model_type = "tiny"
        >>> TinyConfig(num_labels=3).id2label
        {0: 'LABEL_0', 1: 'LABEL_1', 2: 'LABEL_2'}
        >>> TinyConfig(id2label={"0": "cat", "1": "dog"}).num_labels
        2
    """

    def __init__(self, **kwargs: Any):
        num_labels = kwargs.pop("num_labels", None)
        super().__init__(**kwargs)
        id2label = vars(self).get("id2label")
        if id2label is None:
            self.num_labels = 2 if num_labels is None else num_labels
        else:  # id2label wins over a num_labels that disagrees, as in transformers
            self.id2label = {int(key): value for key, value in id2label.items()}

    @property
    def num_labels(self) -> int:
        """The classifier's output count: ``len(id2label)``."""
        return len(self.id2label)

    @num_labels.setter
    def num_labels(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"{type(self).__name__}: num_labels must be a non-negative int, got {value!r}. "
                "Fix: num_labels=2, or give id2label={0: 'neg', 1: 'pos'}"
            )
        if vars(self).get("id2label") is None or len(self.id2label) != value:
            self.id2label = {i: f"LABEL_{i}" for i in range(value)}
            self.label2id = {name: i for i, name in self.id2label.items()}


def _quick_gelu(x: jax.Array) -> jax.Array:
    return x * jax.nn.sigmoid(1.702 * x)


# transformers' ACT2FN names -> the same function. "gelu" is the exact (erf) GELU; "gelu_new",
# "gelu_fast" and "gelu_pytorch_tanh" are all the tanh approximation (same constants).
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "quick_gelu": _quick_gelu,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": F.tanh,
    "sigmoid": F.sigmoid,
}


def activation(owner: str, key: str, name: Any) -> Callable[[jax.Array], jax.Array]:
    """The function transformers' ``ACT2FN[name]`` is, or a ValueError naming the config key."""
    if name not in ACTIVATIONS:
        raise ValueError(
            f"{owner}: {key}={name!r} is not an activation js.models implements; it knows "
            f"{sorted(ACTIVATIONS)}. Fix: set {key} in config.json to one of them"
        )
    return ACTIVATIONS[name]


def check_tokens(
    owner: str, input_ids: Any, inputs_embeds: Any
) -> tuple[jax.Array | None, jax.Array | None]:
    """The one token-input check of js.models: exactly one of ``input_ids`` (integer
    ``[B, L]``) and ``inputs_embeds`` (``[B, L, hidden]``); returns them as arrays (one None).

    Example:
        >>> import jax.numpy as jnp
        >>> from js.models._hf import check_tokens
        >>> check_tokens("Model", jnp.array([[1, 2]]), None)[0].shape
        (1, 2)
    """
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(
            f"{owner}: give exactly one of input_ids and inputs_embeds. Fix: model(input_ids=ids)"
        )
    if inputs_embeds is not None:
        return None, _checked(
            owner, inputs_embeds, 3, jnp.floating, "inputs_embeds", "floating [B, L, hidden]", ""
        )
    fix = ". Fix: add the batch axis, e.g. ids[None]"
    ids = _checked(
        owner,
        input_ids,
        2,
        jnp.integer,
        "input_ids",
        "integer token ids [B, L] (a batch of sequences)",
        fix,
    )
    return ids, None


def _checked(
    owner: str, value: Any, ndim: int, kind: Any, name: str, want: str, fix: str
) -> jax.Array:
    array = jnp.asarray(value)
    if array.ndim != ndim or not jnp.issubdtype(array.dtype, kind):
        raise ValueError(
            f"{owner}: {name} must be {want}, got shape {list(array.shape)} and dtype "
            f"{array.dtype}{fix}"
        )
    return array


def check_heads(
    owner: str,
    hidden: int,
    heads: int,
    keys: tuple[str, str] = ("hidden_size", "num_attention_heads"),
) -> None:
    """Refuses a width ``hidden`` that ``heads`` do not divide (each head takes an equal share
    of it), naming the config's ``keys`` for them."""
    if hidden % heads:
        raise ValueError(
            f"{owner}: {keys[0]}={hidden} is not a multiple of {keys[1]}={heads}. Fix: choose "
            "heads dividing it"
        )


def split_heads(x: jax.Array, heads: int) -> jax.Array:
    """``[B, L, heads * D]`` -> ``[B, heads, L, D]``."""
    B, L, _ = x.shape
    return x.reshape(B, L, heads, -1).transpose(0, 2, 1, 3)  # [B, heads, L, D]


def merge_heads(x: jax.Array) -> jax.Array:
    """``[B, heads, L, D]`` -> ``[B, L, heads * D]`` (``split_heads`` undone)."""
    B, _, L, _ = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, L, -1)


def attend(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    mask: jax.Array | None,
    *,
    dropout: float,
    training: bool,
    rngs: Rngs | None,
) -> jax.Array:
    """transformers' attention (its default, PyTorch's ``scaled_dot_product_attention``):
    ``softmax(q k^T / sqrt(D), masked) v``, heads merged back.

    Args:
        query, key, value: ``[B, heads, L, D]``.
        mask: None, or boolean ``[B, 1, 1, L]``, True = attend (the padding mask). A row with
            no valid key gives zeros, as transformers' default (sdpa) attention does.
        dropout: the probability of dropping attention weights, applied in training only.
        training: the owning layer's mode. rngs: its ``dropout`` stream (training only).

    Returns:
        ``[B, L, heads * D]``.
    """
    p = dropout if training else 0.0
    if p > 0 and rngs is None:
        raise ValueError(
            "attention dropout in training needs a dropout stream. Fix: call the model "
            "with rngs=js.Rngs(dropout=0), or model.eval() for inference"
        )
    draw = rngs.next("dropout") if p > 0 and rngs is not None else None
    output = F.scaled_dot_product_attention(query, key, value, mask, p, dropout_key=draw)
    return merge_heads(output)  # [B, L, heads * D]


def passing_signature(base: Callable[..., Any], *forwards: Callable[..., Any]) -> inspect.Signature:
    """What ``inspect`` and ``help`` show for a head's ``forward`` that passes its ``*inputs,
    **options`` on to ``base`` (the base model's ``forward``): ``base``'s parameters, then the
    keyword options each of ``forwards`` adds (their keyword-only parameters with defaults).

    Example:
        >>> def base(self, input_ids=None, *, cache=None): ...
        >>> def head(self, *inputs, logits_to_keep=0, **options): ...
        >>> passing_signature(base, head)
        <Signature (self, input_ids=None, *, cache=None, logits_to_keep=0)>
    """
    parameters = list(inspect.signature(base).parameters.values())
    for forward in forwards:
        notes = getattr(forward, "__annotations__", {})
        parameters += [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=notes.get(name, inspect.Parameter.empty),
            )
            for name, default in (forward.__kwdefaults__ or {}).items()
        ]
    return inspect.Signature(parameters)


def with_signature(function: Callable[..., Any], signature: inspect.Signature) -> Any:
    """A copy of ``function`` (the same code, no wrapper call) that shows ``signature``: for
    a subclass whose inherited ``forward`` passes on different arguments."""
    assert isinstance(function, types.FunctionType)
    copy = types.FunctionType(
        function.__code__,
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__, copy.__doc__ = function.__qualname__, function.__doc__
    copy.__annotations__ = function.__annotations__
    copy.__signature__ = signature  # type: ignore[attr-defined]
    return copy
