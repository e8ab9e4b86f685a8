"""T5 (Raffel et al., 2019) as transformers 5.23 builds it: ``T5Model``,
``T5ForConditionalGeneration`` and ``T5EncoderModel``, loading ``model_type: "t5"`` folders
(T5 v1.0 with the ReLU feed-forward, v1.1 and Flan-T5 with the gated GELU).

Module names are transformers' (``shared``, ``encoder.block.N.layer.0.SelfAttention.q``,
``decoder.block.N.layer.1.EncDecAttention.k``, ``layer.N.DenseReluDense.wi_0``,
``final_layer_norm``). Each stack's first block holds ``relative_attention_bias``: the bucketed
relative position bias, computed once per forward and added to every block's scores (which are
not scaled by ``1/sqrt(d_kv)``). The norms are RMS norms without a mean or bias. The stacks
share the embedding ``shared``; with ``scale_decoder_outputs`` (transformers 5's name for v1.0's
tied head, set from ``tie_word_embeddings`` in older folders) the decoder's output is scaled by
``d_model ** -0.5`` before ``lm_head``.

Generation (``T5ForConditionalGeneration.generate``) is ``_seq2seq``'s: the source encoded
once, the decoder run by ``js.models.generate``'s loop from ``decoder_start_token_id``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import jax.typing

from js import Rngs, nn
from js.nn import functional as F
from js.nn.attention import decoder_mask, padding_mask

from ._base import PretrainedConfig, PreTrainedModel, architectures
from ._hf import activation, check_tokens, merge_heads, split_heads
from ._seq2seq import Seq2SeqCache, Seq2SeqGenerationMixin, cross_key_values

__all__ = [
    "ARCHITECTURES",
    "T5Config",
    "T5EncoderModel",
    "T5ForConditionalGeneration",
    "T5Model",
    "T5PreTrainedModel",
]


class T5Config(PretrainedConfig):
    """A T5 ``config.json``: transformers' ``T5Config`` keys and defaults (t5-small). The
    feed-forward's kind and activation follow ``feed_forward_proj`` (``"relu"``,
    ``"gated-gelu"``, ...) as transformers derives them."""

    model_type = "t5"
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_hidden_layers": "num_layers",
        "head_dim": "d_kv",
    }

    def __init__(self, **kwargs: Any):
        scale = kwargs.pop("scale_decoder_outputs", None)
        super().__init__(**kwargs)
        if self.num_decoder_layers is None:  # symmetric by default
            self.num_decoder_layers = self.num_layers
        kind = self.feed_forward_proj.split("-")
        if len(kind) > 2 or (len(kind) == 2 and kind[0] != "gated"):
            raise ValueError(
                f"T5Config: feed_forward_proj={self.feed_forward_proj!r} is not 'ACT' or "
                "'gated-ACT'. Fix: 'relu' (T5 v1.0) or 'gated-gelu' (v1.1, Flan-T5)"
            )
        self.is_gated_act = kind[0] == "gated"
        # transformers keeps "gated-gelu" on the tanh GELU, as its first port did
        self.dense_act_fn = "gelu_new" if self.feed_forward_proj == "gated-gelu" else kind[-1]
        if scale is None:  # older folders say it with tie_word_embeddings (v1.1: false)
            scale = self.tie_word_embeddings is not False
        self.scale_decoder_outputs = bool(scale)


def relative_position_bucket(
    relative: jax.Array, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> jax.Array:
    """T5's bucket of each ``key - query`` distance (Mesh TensorFlow's): exact buckets for
    the nearest half, logarithmic ones up to ``max_distance``; with ``bidirectional`` (the
    encoder), half the buckets for keys after the query."""
    buckets = jnp.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).astype(relative.dtype) * num_buckets
        relative = jnp.abs(relative)
    else:
        relative = -jnp.minimum(relative, 0)
    exact = num_buckets // 2
    far = jnp.maximum(relative, 1).astype(jnp.float32) / exact  # log of 0 never taken
    logarithmic = exact + (
        jnp.log(far) / math.log(max_distance / exact) * (num_buckets - exact)
    ).astype(relative.dtype)
    logarithmic = jnp.minimum(logarithmic, num_buckets - 1)
    return buckets + jnp.where(relative < exact, relative, logarithmic)


class T5Attention(nn.Module):
    """T5's multi-head attention: ``q``, ``k``, ``v``, ``o`` without biases, unscaled scores
    plus a bias (the relative position bias and the mask); the stack's first self-attention
    holds ``relative_attention_bias`` (``[num_buckets, heads]``)."""

    def __init__(self, config: T5Config, *, relative_bias: bool, rngs: Rngs):
        super().__init__()
        self.config = config
        inner, d_model = config.num_heads * config.d_kv, config.d_model
        self.q = nn.Linear(d_model, inner, bias=False, rngs=rngs)
        self.k = nn.Linear(d_model, inner, bias=False, rngs=rngs)
        self.v = nn.Linear(d_model, inner, bias=False, rngs=rngs)
        self.o = nn.Linear(inner, d_model, bias=False, rngs=rngs)
        if relative_bias:
            buckets = config.relative_attention_num_buckets
            self.relative_attention_bias = nn.Embedding(buckets, config.num_heads, rngs=rngs)

    def key_values(self, hidden: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``hidden``'s keys and values, ``[B, heads, S, d_kv]`` each."""
        heads = self.config.num_heads
        return split_heads(self.k(hidden), heads), split_heads(self.v(hidden), heads)

    def position_bias(self, query: jax.Array, key: jax.Array, *, bidirectional: bool) -> jax.Array:
        """``[1, heads, Tq, Tk]``: the learnt bias of each query position ``query [Tq]`` and
        key position ``key [Tk]``."""
        config = self.config
        bucket = relative_position_bucket(
            key[None, :] - query[:, None],  # [Tq, Tk]
            bidirectional=bidirectional,
            num_buckets=config.relative_attention_num_buckets,
            max_distance=config.relative_attention_max_distance,
        )
        return self.relative_attention_bias(bucket).transpose(2, 0, 1)[None]

    def forward(
        self,
        hidden: jax.Array,
        bias: jax.Array,
        key_values: tuple[jax.Array, jax.Array],
        *,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        """``[B, T, d_model]``: ``hidden``'s queries attending to ``key_values`` with the
        additive ``bias`` (``-inf`` masks out)."""
        query = split_heads(self.q(hidden), self.config.num_heads)  # [B, heads, T, d_kv]
        p = self.config.dropout_rate if self.training else 0.0
        draw = rngs.next("dropout") if p > 0 and rngs is not None else None
        out = F.scaled_dot_product_attention(
            query, *key_values, bias.astype(query.dtype), p, scale=1.0, dropout_key=draw
        )
        return self.o(merge_heads(out))


class _T5LayerAttention(nn.Module):
    """``hidden + dropout(attention(layer_norm(hidden)))``; the attention module's name is
    ``attention_name`` (transformers' ``SelfAttention`` / ``EncDecAttention``)."""

    attention_name: ClassVar[str] = ""

    def __init__(self, config: T5Config, *, relative_bias: bool = False, rngs: Rngs):
        super().__init__()
        attention = T5Attention(config, relative_bias=relative_bias, rngs=rngs)
        setattr(self, self.attention_name, attention)
        self.layer_norm = nn.RMSNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    @property
    def attention(self) -> T5Attention:
        """The attention module."""
        return getattr(self, self.attention_name)

    def forward(self, hidden: jax.Array, bias: jax.Array, kv: Any, *, rngs: Rngs | None = None):
        """``kv``: the keys and values, or a function of the normed input giving them."""
        normed = self.layer_norm(hidden)
        key_values = kv(normed) if callable(kv) else kv
        return hidden + self.dropout(self.attention(normed, bias, key_values, rngs=rngs), rngs=rngs)


class T5LayerSelfAttention(_T5LayerAttention):
    """A block's self-attention sub-layer."""

    attention_name = "SelfAttention"


class T5LayerCrossAttention(_T5LayerAttention):
    """A decoder block's cross-attention sub-layer (over the encoder's output)."""

    attention_name = "EncDecAttention"


class T5DenseReluDense(nn.Module):
    """The feed-forward: ``wo(dropout(act(wi(x))))`` (v1.0), or with ``is_gated_act``
    ``wo(dropout(act(wi_0(x)) * wi_1(x)))`` (v1.1, Flan-T5)."""

    def __init__(self, config: T5Config, *, rngs: Rngs):
        super().__init__()
        d_model, d_ff = config.d_model, config.d_ff
        if config.is_gated_act:
            self.wi_0 = nn.Linear(d_model, d_ff, bias=False, rngs=rngs)
            self.wi_1 = nn.Linear(d_model, d_ff, bias=False, rngs=rngs)
        else:
            self.wi = nn.Linear(d_model, d_ff, bias=False, rngs=rngs)
        self.wo = nn.Linear(d_ff, d_model, bias=False, rngs=rngs)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = activation("T5Config", "dense_act_fn", config.dense_act_fn)
        self.gated = config.is_gated_act

    def forward(self, x: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        hidden = self.act(self.wi_0(x)) * self.wi_1(x) if self.gated else self.act(self.wi(x))
        return self.wo(self.dropout(hidden, rngs=rngs))


class T5LayerFF(nn.Module):
    """``hidden + dropout(DenseReluDense(layer_norm(hidden)))``."""

    def __init__(self, config: T5Config, *, rngs: Rngs):
        super().__init__()
        self.DenseReluDense = T5DenseReluDense(config, rngs=rngs)
        self.layer_norm = nn.RMSNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, hidden: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        forwarded = self.DenseReluDense(self.layer_norm(hidden), rngs=rngs)
        return hidden + self.dropout(forwarded, rngs=rngs)


class T5Block(nn.Module):
    """A block's sub-layers, ``layer``: self-attention, (decoder) cross-attention,
    feed-forward; the stack runs them."""

    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.layer = nn.ModuleList(layers)


class T5Stack(nn.Module):
    """The encoder or (``is_decoder``) the decoder: ``block`` (self-attention, for the decoder
    cross-attention, feed-forward; block 0 holds the relative position bias) and
    ``final_layer_norm``. Takes embedded tokens; the model holds the shared embedding."""

    def __init__(self, config: T5Config, *, is_decoder: bool, rngs: Rngs):
        super().__init__()
        self.is_decoder = is_decoder
        count = config.num_decoder_layers if is_decoder else config.num_layers
        self.block = nn.ModuleList([self._block(config, i == 0, rngs) for i in range(count)])
        self.final_layer_norm = nn.RMSNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def _block(self, config: T5Config, first: bool, rngs: Rngs) -> T5Block:
        layers: list[nn.Module] = [T5LayerSelfAttention(config, relative_bias=first, rngs=rngs)]
        if self.is_decoder:
            layers.append(T5LayerCrossAttention(config, rngs=rngs))
        return T5Block([*layers, T5LayerFF(config, rngs=rngs)])

    def self_attention_bias(self, T: int, attention_mask: Any, cache: Any) -> jax.Array:
        """``[B|1, heads, T, Tk]``: the relative position bias where a query may attend, else
        ``-inf``. The positions are the cache's slots when decoding with one (their
        differences are the tokens' distances: the padding is masked out)."""
        first: Any = self.block[0]
        attention = first.layer[0].SelfAttention
        query = jnp.arange(T)
        if cache is not None:
            cache.begin(T, attention_mask)
            mask, query = cache.mask(T), cache.start.value + query  # [B, 1, T, max_length]
        elif self.is_decoder:
            mask = decoder_mask(T, attention_mask)  # [B|1, 1, T, T]
        else:
            valid = None if attention_mask is None else jnp.asarray(attention_mask) != 0
            mask = None if valid is None else padding_mask(valid)  # [B, 1, 1, T]
        key = jnp.arange(T if cache is None else cache.max_length)
        bias = attention.position_bias(query, key, bidirectional=not self.is_decoder)
        return bias if mask is None else jnp.where(mask, bias, -jnp.inf)

    def forward(
        self,
        inputs_embeds: jax.Array,
        attention_mask: Any = None,
        *,
        encoder_hidden_states: jax.Array | None = None,
        encoder_attention_mask: Any = None,
        cache: Any = None,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        """``[B, T, d_model]`` after the blocks and ``final_layer_norm``. A decoder attends
        to ``encoder_hidden_states`` (or the keys and values of a ``Seq2SeqCache``)."""
        T = inputs_embeds.shape[1]
        bias = self.self_attention_bias(T, attention_mask, cache)
        if isinstance(cache, Seq2SeqCache):
            cross_mask = cache.encoder_mask()
        elif encoder_attention_mask is None:
            cross_mask = jnp.ones((1, 1, 1, 1), bool)
        else:
            cross_mask = padding_mask(jnp.asarray(encoder_attention_mask) != 0)
        cross_bias = jnp.where(cross_mask, 0.0, -jnp.inf)  # [B, 1, 1, S]: no position bias
        hidden = self.dropout(inputs_embeds, rngs=rngs)
        blocks: list[Any] = list(self.block)
        for index, block in enumerate(blocks):
            own, *cross, feed_forward = block.layer

            def kv(normed, own=own, index=index):
                k, v = own.attention.key_values(normed)
                return (k, v) if cache is None else cache.update(index, k, v)

            hidden = own(hidden, bias, kv, rngs=rngs)
            for layer in cross:
                kv_cross = cross_key_values(
                    layer.attention, index, encoder_hidden_states, cache, hidden.dtype
                )
                hidden = layer(hidden, cross_bias, kv_cross, rngs=rngs)
            hidden = feed_forward(hidden, rngs=rngs)
        return self.dropout(self.final_layer_norm(hidden), rngs=rngs)


class T5PreTrainedModel(PreTrainedModel):
    """The T5 models' config, file rules and shared embedding ``shared``."""

    config_class = T5Config
    base_model_prefix = "transformer"
    # Older files repeat the shared embedding under each stack; the decoder's cross-attention
    # never had a relative bias (transformers ignores that key too).
    ignore_on_load = (
        r"^(encoder|decoder)\.embed_tokens\.weight$",
        r"^decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight$",
    )

    def __init__(self, config: T5Config, *, rngs: Rngs):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, rngs=rngs)
        self.encoder = T5Stack(config, is_decoder=False, rngs=rngs)

    def encode(self, input_ids: Any, attention_mask: Any = None, **options: Any) -> jax.Array:
        """The encoder's last hidden state ``[B, S, d_model]`` (``options``: ``rngs``, for
        dropout in training)."""
        ids, _ = check_tokens(type(self).__name__, input_ids, None)
        return self.encoder(self.shared(ids), attention_mask, **options)


class T5EncoderModel(T5PreTrainedModel):
    """T5's encoder and the shared embedding: ``[B, S, d_model]`` (transformers'
    ``last_hidden_state``); the text encoder of many diffusion models."""

    ignore_on_load = (*T5PreTrainedModel.ignore_on_load, r"^decoder\.", r"^lm_head\.")

    forward = T5PreTrainedModel.encode


class T5Model(T5PreTrainedModel):
    """T5's encoder and decoder: the decoder's last hidden state ``[B, T, d_model]``."""

    ignore_on_load = (*T5PreTrainedModel.ignore_on_load, r"^lm_head\.")

    def __init__(self, config: T5Config, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.decoder = T5Stack(config, is_decoder=True, rngs=rngs)

    def forward(
        self,
        input_ids: jax.typing.ArrayLike | None = None,
        attention_mask: jax.typing.ArrayLike | None = None,
        decoder_input_ids: jax.typing.ArrayLike | None = None,
        decoder_attention_mask: jax.typing.ArrayLike | None = None,
        *,
        encoder_outputs: jax.Array | None = None,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        """``input_ids``/``attention_mask``: the source (or its encoding ``encoder_outputs``,
        ``[B, S, d_model]``); ``decoder_input_ids`` ``[B, T]``: the decoder's tokens."""
        if encoder_outputs is None:
            encoder_outputs = self.encode(input_ids, attention_mask, rngs=rngs)
        ids, _ = check_tokens(type(self).__name__, decoder_input_ids, None)
        return self.decoder(
            self.shared(ids),
            decoder_attention_mask,
            encoder_hidden_states=encoder_outputs,
            encoder_attention_mask=attention_mask,
            rngs=rngs,
        )


class T5ForConditionalGeneration(Seq2SeqGenerationMixin, T5Model):
    """``T5Model`` and ``lm_head`` (the shared embedding's weight with
    ``tie_word_embeddings``): next-token logits ``[B, T, vocab]`` of the decoder, and
    ``generate`` (encode once, then the decoder from ``decoder_start_token_id``)."""

    ignore_on_load = T5PreTrainedModel.ignore_on_load

    def __init__(self, config: T5Config, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False, rngs=rngs)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.shared.weight

    def logits(self, hidden: jax.Array, logits_to_keep: int = 0) -> jax.Array:
        """``lm_head`` over the decoder's output (its last ``logits_to_keep`` positions)."""
        hidden = hidden[:, -logits_to_keep:] if logits_to_keep > 0 else hidden
        if self.config.scale_decoder_outputs:
            hidden = hidden * jnp.asarray(self.config.d_model**-0.5, hidden.dtype)
        return self.lm_head(hidden)

    def forward(self, *inputs: Any, **options: Any) -> jax.Array:
        """Logits ``[B, T, vocab]``; the arguments are ``T5Model.forward``'s."""
        return self.logits(super().forward(*inputs, **options))

    # -- the encoder-decoder generation contract (_seq2seq) --

    def cross_attentions(self) -> list[T5Attention]:
        """Each decoder block's cross-attention."""
        return [block.layer[1].EncDecAttention for block in self.decoder.block]

    def make_decoder_cache(self, batch_size: int, max_length: int, *, dtype: Any = None):
        """The decoder's self-attention ``js.nn.KVCache``."""
        config = self.config
        dtype = self.shared.weight.value.dtype if dtype is None else dtype
        layers, heads = config.num_decoder_layers, config.num_heads
        return nn.KVCache(batch_size, max_length, layers, heads, config.d_kv, dtype=dtype)

    def decode(
        self, input_ids: Any, attention_mask: Any = None, *, cache: Any, logits_to_keep: int = 0
    ) -> jax.Array:
        """Logits of the decoder's tokens over the source held by ``cache``."""
        hidden = self.decoder(self.shared(input_ids), attention_mask, cache=cache)
        return self.logits(hidden, logits_to_keep)


ARCHITECTURES = architectures(T5ForConditionalGeneration, T5Model, T5EncoderModel)
