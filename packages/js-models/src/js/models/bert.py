"""BERT (Devlin et al., 2018) as transformers 5.23 builds it: ``BertModel`` and
``BertForSequenceClassification``, loading Hugging Face ``model_type: "bert"`` folders.

Module names are transformers' (``embeddings.LayerNorm``, ``encoder.layer.N.attention.self.
query``, ``pooler.dense``), which are also the keys of its files: transformers 5 did not rename
BERT's modules, so files load without renaming. ``key_mapping`` covers the one older spelling
transformers still accepts (TensorFlow-era ``LayerNorm.gamma``/``beta``), and ``ignore_on_load``
the ``position_ids`` buffer files written before transformers 4.31 carry.

Encoder only: ``is_decoder``, cross-attention and relative position embeddings raise
NotImplementedError when the model is built.
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from js import Buffer, Rngs, nn
from js.nn.attention import padding_mask

from ._base import PreTrainedModel
from ._hf import LabelledConfig, activation, attend, check_tokens, split_heads


class BertConfig(LabelledConfig):
    """A BERT ``config.json``: transformers' ``BertConfig`` keys and defaults (bert-base).

    Example:
        >>> config = BertConfig(hidden_size=32, num_attention_heads=4, num_labels=3)
        >>> config.intermediate_size, config.num_labels
        (3072, 3)
    """

    model_type = "bert"
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "classifier_dropout": None,
        "is_decoder": False,
        "add_cross_attention": False,
    }


def _check_config(config: BertConfig) -> None:
    """What this port does not build, refused before any layer is made."""
    unsupported = {
        "is_decoder": bool(getattr(config, "is_decoder", False)),
        "add_cross_attention": bool(getattr(config, "add_cross_attention", False)),
    }
    for key, on in unsupported.items():
        if on:
            raise NotImplementedError(
                f"BertModel: {key}=True (BERT as a decoder) is not implemented; js.models "
                f"ports the encoder. Fix: set {key} to false in config.json"
            )
    kind = getattr(config, "position_embedding_type", "absolute")
    if kind != "absolute":
        raise NotImplementedError(
            f"BertModel: position_embedding_type={kind!r} is not implemented (transformers 5 "
            "dropped relative position embeddings too). Fix: use an 'absolute' checkpoint"
        )
    if config.hidden_size % config.num_attention_heads:
        raise ValueError(
            f"BertModel: hidden_size={config.hidden_size} is not a multiple of "
            f"num_attention_heads={config.num_attention_heads}. Fix: choose heads dividing it"
        )


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout.

    Shape:
        ``input_ids``, ``token_type_ids``, ``position_ids`` ``[B, L]`` ints -> ``[B, L, H]``.
    """

    position_ids: Buffer  # [1, max_position_embeddings] int, 0..max-1 (not saved)
    token_type_ids: Buffer  # [1, max_position_embeddings] int, zeros (not saved)

    def __init__(self, config: BertConfig, *, rngs: Rngs):
        super().__init__()
        H = config.hidden_size
        pad = config.pad_token_id
        self.word_embeddings = nn.Embedding(config.vocab_size, H, padding_idx=pad, rngs=rngs)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, H, rngs=rngs)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, H, rngs=rngs)
        self.LayerNorm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.max_positions = config.max_position_embeddings
        # transformers' non-persistent buffers (not in its files): [1, max_positions] each
        positions = np.arange(config.max_position_embeddings)[None]
        self.register_buffer("position_ids", positions, persistent=False)
        self.register_buffer("token_type_ids", np.zeros_like(positions), persistent=False)

    def forward(
        self,
        input_ids: jax.Array | None = None,
        token_type_ids: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        inputs_embeds: jax.Array | None = None,
        *,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        embeds = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        B, L = embeds.shape[:2]  # embeds [B, L, H]
        if L > self.max_positions:
            raise ValueError(
                f"BertModel: sequence length {L} exceeds max_position_embeddings="
                f"{self.max_positions}. Fix: truncate the input to {self.max_positions} tokens"
            )
        if position_ids is None:
            position_ids = self.position_ids.value[:, :L]  # [1, L]
        if token_type_ids is None:  # transformers gathers its zero buffer at position_ids
            token_type_ids = jnp.broadcast_to(self.token_type_ids.value[:, :L], (B, L))
        embeddings = embeds + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings), rngs=rngs)


class BertSelfAttention(nn.Module):
    """The ``query``/``key``/``value`` projections and scaled dot-product attention."""

    def __init__(self, config: BertConfig, *, rngs: Rngs):
        super().__init__()
        H = config.hidden_size
        self.num_attention_heads = config.num_attention_heads
        self.query = nn.Linear(H, H, rngs=rngs)
        self.key = nn.Linear(H, H, rngs=rngs)
        self.value = nn.Linear(H, H, rngs=rngs)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        heads = self.num_attention_heads
        q = split_heads(self.query(hidden_states), heads)  # [B, heads, L, D]
        k = split_heads(self.key(hidden_states), heads)
        v = split_heads(self.value(hidden_states), heads)
        p, training = self.dropout.p, self.dropout.training
        return attend(q, k, v, mask, dropout=p, training=training, rngs=rngs)  # [B, L, H]


class BertOutput(nn.Module):
    """``LayerNorm(dropout(dense(x)) + residual)``, intermediate -> hidden size."""

    def __init__(self, config: BertConfig, *, rngs: Rngs, in_features: int | None = None):
        super().__init__()
        size: int = config.intermediate_size if in_features is None else in_features
        self.dense = nn.Linear(size, config.hidden_size, rngs=rngs)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, hidden_states: jax.Array, input_tensor: jax.Array, *, rngs: Rngs | None = None
    ) -> jax.Array:
        hidden_states = self.dropout(self.dense(hidden_states), rngs=rngs)
        return self.LayerNorm(hidden_states + input_tensor)


class BertSelfOutput(BertOutput):
    """``LayerNorm(dropout(dense(x)) + residual)`` after attention (hidden -> hidden)."""

    def __init__(self, config: BertConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs, in_features=config.hidden_size)


class BertAttention(nn.Module):
    """Self-attention (``self``) and its output block (``output``)."""

    def __init__(self, config: BertConfig, *, rngs: Rngs):
        super().__init__()
        self.self = BertSelfAttention(config, rngs=rngs)
        self.output = BertSelfOutput(config, rngs=rngs)

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        attention = self.self(hidden_states, mask, rngs=rngs)
        return self.output(attention, hidden_states, rngs=rngs)


class BertIntermediate(nn.Module):
    """``act(dense(x))``, hidden -> intermediate size."""

    def __init__(self, config: BertConfig, *, rngs: Rngs):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size, rngs=rngs)
        self.intermediate_act_fn = activation("BertModel", "hidden_act", config.hidden_act)

    def forward(self, hidden_states: jax.Array) -> jax.Array:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertLayer(nn.Module):
    """One post-LayerNorm encoder block: attention, then the feed-forward block."""

    def __init__(self, config: BertConfig, *, rngs: Rngs):
        super().__init__()
        self.attention = BertAttention(config, rngs=rngs)
        self.intermediate = BertIntermediate(config, rngs=rngs)
        self.output = BertOutput(config, rngs=rngs)

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        attention = self.attention(hidden_states, mask, rngs=rngs)
        return self.output(self.intermediate(attention), attention, rngs=rngs)


class BertEncoder(nn.Module):
    """``num_hidden_layers`` ``BertLayer``s in ``layer``."""

    def __init__(self, config: BertConfig, *, rngs: Rngs):
        super().__init__()
        self.layer = nn.ModuleList(
            [BertLayer(config, rngs=rngs) for _ in range(config.num_hidden_layers)]
        )

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        for layer in self.layer:
            hidden_states = layer(hidden_states, mask, rngs=rngs)
        return hidden_states


class BertPooler(nn.Module):
    """``tanh(dense(h[:, 0]))``: the first ([CLS]) token's hidden state, pooled."""

    def __init__(self, config: BertConfig, *, rngs: Rngs):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, rngs=rngs)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: jax.Array) -> jax.Array:
        return self.activation(self.dense(hidden_states[:, 0]))  # [B, H]


def _padding_mask(attention_mask: Any, shape: tuple[int, int]) -> jax.Array | None:
    """transformers' ``attention_mask`` ``[B, L]`` (1 = token, 0 = padding) -> the boolean
    key mask ``[B, 1, 1, L]`` (True = attend), or None for no mask."""
    if attention_mask is None:
        return None
    mask = jnp.asarray(attention_mask)
    if mask.shape != shape:
        raise ValueError(
            f"BertModel: attention_mask must be [batch, seq_len] = {list(shape)} like "
            f"input_ids, got {list(mask.shape)}. Fix: pass the tokenizer's attention_mask "
            "(1 for tokens, 0 for padding)"
        )
    return padding_mask(mask != 0)  # [B, 1, 1, L]


class BertPreTrainedModel(PreTrainedModel):
    """What every BERT model shares: its config class, prefix and file-name rules."""

    config: BertConfig
    config_class = BertConfig
    base_model_prefix = "bert"
    # transformers' "legacy" renamings (conversion_mapping.py), still applied on load in 5.23
    key_mapping: ClassVar[dict[str, str]] = {
        r"LayerNorm\.gamma": "LayerNorm.weight",
        r"LayerNorm\.beta": "LayerNorm.bias",
    }
    # Files from transformers < 4.31 hold the position_ids buffer; transformers ignores it.
    ignore_on_load: ClassVar[tuple[str, ...]] = (r"(^|\.)position_ids$",)


class BertModel(BertPreTrainedModel):
    """The BERT encoder: embeddings, ``num_hidden_layers`` post-LayerNorm blocks and, with
    ``add_pooling_layer``, the pooler.

    Args:
        config: a ``BertConfig``.
        add_pooling_layer: build ``pooler`` (transformers' default True).
        rngs: ``js.Rngs`` with a ``params`` stream, for the (random) initial weights.

    Shape:
        ``input_ids`` ``[B, L]`` -> ``(last_hidden_state [B, L, H], pooler_output [B, H] or
        None)``.

    Example:
        >>> import jax.numpy as jnp, js
        >>> config = BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
        ...                     num_attention_heads=2, intermediate_size=16)
        >>> model = BertModel(config, rngs=js.Rngs(params=0)).eval()
        >>> hidden, pooled = model(jnp.array([[2, 5, 7]]), attention_mask=jnp.array([[1, 1, 0]]))
        >>> hidden.shape, pooled.shape
        ((1, 3, 8), (1, 8))
    """

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True, *, rngs: Rngs):
        _check_config(config)
        super().__init__(config)
        self.embeddings = BertEmbeddings(config, rngs=rngs)
        self.encoder = BertEncoder(config, rngs=rngs)
        self.pooler = BertPooler(config, rngs=rngs) if add_pooling_layer else None

    def forward(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        token_type_ids: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        inputs_embeds: jax.Array | None = None,
        *,
        rngs: Rngs | None = None,
    ) -> tuple[jax.Array, jax.Array | None]:
        """Encode a batch.

        Args:
            input_ids: token ids ``[B, L]`` (or give ``inputs_embeds [B, L, H]`` instead).
            attention_mask: ``[B, L]``, 1 for tokens and 0 for padding (default: all tokens).
                Padding is masked as a key; padded positions still get (unused) outputs.
            token_type_ids: segment ids ``[B, L]`` (default: all 0).
            position_ids: ``[B, L]`` or ``[1, L]`` (default: ``0..L-1``).
            inputs_embeds: word embeddings to use instead of looking ``input_ids`` up.
            rngs: a ``dropout`` stream, needed in training mode only.

        Returns:
            ``(last_hidden_state [B, L, H], pooler_output [B, H])``; pooler_output is None for a
            model built with ``add_pooling_layer=False``.
        """
        input_ids, inputs_embeds = check_tokens("BertModel", input_ids, inputs_embeds)
        given = inputs_embeds if input_ids is None else input_ids
        assert given is not None  # check_tokens returns exactly one
        B, L = given.shape[:2]
        mask = _padding_mask(attention_mask, (B, L))
        hidden = self.embeddings(
            input_ids, token_type_ids, position_ids, inputs_embeds, rngs=rngs
        )  # [B, L, H]
        hidden = self.encoder(hidden, mask, rngs=rngs)
        pooled = None if self.pooler is None else self.pooler(hidden)
        return hidden, pooled


class BertForSequenceClassification(BertPreTrainedModel):
    """BERT with a linear ``classifier`` on the pooled [CLS] state: ``num_labels`` logits.

    Args:
        config: a ``BertConfig``; ``num_labels`` comes from ``id2label`` (else ``num_labels``,
            else 2); the head's dropout is ``classifier_dropout`` (else ``hidden_dropout_prob``).
        rngs: ``js.Rngs`` with a ``params`` stream.

    Shape:
        ``input_ids`` ``[B, L]`` -> logits ``[B, num_labels]``.

    Example:
        >>> import jax.numpy as jnp, js
        >>> config = BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
        ...                     num_attention_heads=2, intermediate_size=16, num_labels=3)
        >>> model = BertForSequenceClassification(config, rngs=js.Rngs(params=0)).eval()
        >>> model(jnp.array([[2, 5, 7]])).shape
        (1, 3)
    """

    def __init__(self, config: BertConfig, *, rngs: Rngs):
        _check_config(config)
        super().__init__(config)
        p = config.classifier_dropout
        self.bert = BertModel(config, rngs=rngs)
        self.dropout = nn.Dropout(config.hidden_dropout_prob if p is None else p)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels, rngs=rngs)

    def forward(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        token_type_ids: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        inputs_embeds: jax.Array | None = None,
        *,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        """Classify a batch: the arguments are ``BertModel.forward``'s; returns logits
        ``[B, num_labels]``."""
        _, pooled = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, rngs=rngs
        )
        return self.classifier(self.dropout(pooled, rngs=rngs))


ARCHITECTURES: dict[str, type[PreTrainedModel]] = {
    "BertModel": BertModel,
    "BertForSequenceClassification": BertForSequenceClassification,
}
DEFAULT_ARCHITECTURE = "BertModel"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "BertConfig",
    "BertForSequenceClassification",
    "BertModel",
]
