"""MPNet (Song et al., 2020) as transformers 5.23 builds it, loading Hugging Face
``model_type: "mpnet"`` folders (all-mpnet-base-v2 and the other sentence-transformers MPNets):
``MPNetModel`` and its masked-LM, sequence and token classification and question-answering
heads.

MPNet is BERT's post-norm encoder with three differences:

- a relative position bias added to every layer's attention scores, one table for all layers
  (``encoder.relative_attention_bias``, ``[buckets, heads]``), indexed by T5's bidirectional
  log-spaced buckets of ``key - query`` (transformers computes 32 buckets, whatever
  ``relative_attention_num_buckets`` says, and so does js);
- RoBERTa's positions (from ``padding_idx`` 1 + 1 over the non-padding tokens) and no token
  types;
- each layer's attention holds its output projection (``attention.attn.q/k/v/o``) and its
  LayerNorm (``attention.LayerNorm``).

Its heads are RoBERTa's (``lm_head``; ``classifier`` with tanh on the first token).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from js import Module, Rngs, nn

from . import _encoder_heads as heads
from ._base import architectures
from ._encoder import (
    Encoder,
    EncoderAttention,
    EncoderConfig,
    EncoderLayer,
    EncoderModel,
    EncoderSelfAttention,
)
from ._text_embeddings import TextEmbeddings
from .bert import BertPreTrainedModel
from .roberta import RobertaLMHead

__all__ = [
    "ARCHITECTURES",
    "MPNetConfig",
    "MPNetForMaskedLM",
    "MPNetForQuestionAnswering",
    "MPNetForSequenceClassification",
    "MPNetForTokenClassification",
    "MPNetModel",
    "MPNetPreTrainedModel",
]


class MPNetConfig(EncoderConfig):
    """An MPNet ``config.json``: transformers' ``MPNetConfig`` keys and defaults (mpnet-base:
    BERT-base's encoder, 32 relative position buckets).

    Example:
        >>> MPNetConfig(hidden_size=64).relative_attention_num_buckets
        32
    """

    model_type = "mpnet"


class MPNetEmbeddings(TextEmbeddings):
    """Word + position embeddings with RoBERTa's positions past padding index 1 (fixed in
    transformers' MPNet, whatever ``pad_token_id`` says), LayerNorm and dropout."""

    def position_padding(self, config: EncoderConfig) -> int | None:
        return 1  # transformers' MPNetEmbeddings.padding_idx, whatever pad_token_id says


class MPNetSelfAttention(EncoderSelfAttention):
    """transformers' ``MPNetSelfAttention``: ``q``/``k``/``v``, attention (the position bias
    in the floating mask), ``o``."""

    projection_names = ("q", "k", "v", "o")


class MPNetAttention(EncoderAttention):
    """``LayerNorm(dropout(attn(x)) + residual)``: the self-attention at ``attn`` (its output
    projection ``o`` inside), then the norm and dropout of BERT's ``output`` block, here at the
    attention itself (``output`` is this class's method, which ``EncoderAttention.forward``
    calls)."""

    def __init__(self, config: MPNetConfig, *, rngs: Rngs):
        Module.__init__(self)  # MPNet's modules, not BERT's attention blocks
        self.self_name = "attn"
        self.attn = MPNetSelfAttention(config, rngs=rngs)
        self.LayerNorm = config.make_norm(config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def output(self, attended: jax.Array, residual: jax.Array, *, rngs: Rngs | None) -> jax.Array:
        """The post-norm residual block: ``LayerNorm(dropout(attended) + residual)``."""
        return self.LayerNorm(self.dropout(attended, rngs=rngs) + residual)


class MPNetLayer(EncoderLayer):
    """BERT's layer with ``MPNetAttention``."""

    attention_class = MPNetAttention


def relative_position_bucket(
    relative_position: np.ndarray, num_buckets: int = 32, max_distance: int = 128
) -> np.ndarray:
    """transformers' ``MPNetEncoder.relative_position_bucket`` (T5's bidirectional buckets),
    on the host in float32 as torch computes it: half the buckets for each direction, exact
    below ``num_buckets // 4``, log-spaced up to ``max_distance``.

    Example:
        >>> relative_position_bucket(np.array([-1, 0, 1, 5, 200])).tolist()
        [1, 0, 17, 21, 31]
    """
    half = num_buckets // 2
    n = -relative_position
    base = (n < 0) * half
    n = np.abs(n)
    exact = half // 2
    # the log-spaced buckets (for n >= exact; at least 1 where the exact bucket is taken)
    ratio = np.maximum(n, 1).astype(np.float32) / np.float32(exact)
    scaled = np.log(ratio) / np.float32(math.log(max_distance / exact))
    large = exact + (scaled * np.float32(half - exact)).astype(np.int64)
    return base + np.where(n < exact, n, np.minimum(large, half - 1))


class MPNetEncoder(Encoder):
    """The layers (``layer``) and the position bias they share (``relative_attention_bias``,
    an ``Embedding(relative_attention_num_buckets, num_attention_heads)``), added to every
    layer's scores with the padding mask.

    Shape:
        ``hidden_states`` ``[B, L, hidden]``, ``mask`` None or boolean ``[B, 1, 1, L]`` ->
        ``[B, L, hidden]``.
    """

    layer_class = MPNetLayer

    def __init__(self, config: MPNetConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        buckets, heads = config.relative_attention_num_buckets, config.num_attention_heads
        self.relative_attention_bias = nn.Embedding(buckets, heads, rngs=rngs)

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        positions = np.arange(hidden_states.shape[1])
        buckets = relative_position_bucket(positions[None, :] - positions[:, None])  # [L, L]
        bias = self.relative_attention_bias(jnp.asarray(buckets)).transpose(2, 0, 1)[None]
        # [B|1, heads, L, L]: the bias, -inf at padded keys
        scores_mask = bias if mask is None else jnp.where(mask, bias, -jnp.inf)
        return super().forward(hidden_states, scores_mask, rngs=rngs)


class MPNetPreTrainedModel(BertPreTrainedModel):
    """What every MPNet model shares: BERT's ``forward`` (``token_type_ids`` refused) and file
    rules, MPNet's config and prefix (``mpnet``)."""

    config_class = MPNetConfig
    base_model_prefix = "mpnet"


class MPNetModel(EncoderModel, MPNetPreTrainedModel):
    """The MPNet encoder: ``embeddings``, ``encoder`` (with the position bias) and, with
    ``add_pooling_layer``, ``pooler`` (``tanh(dense(h[:, 0]))``)."""

    embeddings_class = MPNetEmbeddings
    encoder_class = MPNetEncoder


class MPNetForMaskedLM(heads.EncoderForMaskedLM, MPNetPreTrainedModel):
    """MPNet (no pooler) with RoBERTa's ``lm_head``: logits ``[B, L, vocab_size]``."""

    lm_head_class = RobertaLMHead


class MPNetForSequenceClassification(heads.EncoderForSequenceClassification, MPNetPreTrainedModel):
    """MPNet (no pooler) with ``classifier`` (dense, tanh, out_proj) on the first token:
    logits ``[B, num_labels]``."""

    classifier_activation = "tanh"


class MPNetForTokenClassification(heads.EncoderForTokenClassification, MPNetPreTrainedModel):
    """MPNet with ``dropout`` and ``classifier`` on every token: ``[B, L, num_labels]``."""


class MPNetForQuestionAnswering(heads.EncoderForQuestionAnswering, MPNetPreTrainedModel):
    """MPNet with ``qa_outputs``: ``(start_logits, end_logits)``, each ``[B, L]``."""


ARCHITECTURES = architectures(
    MPNetModel,
    MPNetForMaskedLM,
    MPNetForSequenceClassification,
    MPNetForTokenClassification,
    MPNetForQuestionAnswering,
)
