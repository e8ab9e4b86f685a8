"""DistilBERT (Sanh et al., 2019) as transformers 5.23 builds it, loading Hugging Face
``model_type: "distilbert"`` folders: ``DistilBertModel`` and its masked-LM, sequence and token
classification and question-answering heads.

DistilBERT is BERT's post-norm encoder under other names: the layers are at
``transformer.layer.N``, each ``attention`` (``q_lin``/``k_lin``/``v_lin``/``out_lin``),
``sa_layer_norm``, ``ffn`` (``lin1``, activation, ``lin2``) and ``output_layer_norm``; the
embeddings have no token types and the model no pooler. Its config names BERT's keys its own
way (``dim``, ``n_layers``, ``hidden_dim``, ``activation``, ...), aliased to BERT's for the
skeleton (``attribute_map``), and its LayerNorms' epsilon is fixed at 1e-12.

``forward`` is BERT's (``BertPreTrainedModel.forward``), whose third argument is
``token_type_ids`` (refused: DistilBERT has none); transformers' DistilBERT takes
``(input_ids, attention_mask, inputs_embeds, position_ids)``: pass them by keyword.
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import numpy as np

from js import Module, Rngs, nn
from js.nn import functional as F

from . import _encoder_heads as heads
from ._base import architectures
from ._encoder import Encoder, EncoderConfig, EncoderModel, EncoderSelfAttention
from ._hf import activation
from ._text_embeddings import TextEmbeddings
from .bert import BertPreTrainedModel

__all__ = [
    "ARCHITECTURES",
    "DistilBertConfig",
    "DistilBertForMaskedLM",
    "DistilBertForQuestionAnswering",
    "DistilBertForSequenceClassification",
    "DistilBertForTokenClassification",
    "DistilBertModel",
    "DistilBertPreTrainedModel",
]


class DistilBertConfig(EncoderConfig):
    """A DistilBERT ``config.json``: transformers' ``DistilBertConfig`` keys and defaults
    (distilbert-base: BERT-base's encoder in 6 layers), BERT's key names aliased to its own.

    Example:
        >>> config = DistilBertConfig(dim=32, n_heads=4)
        >>> config.hidden_size, config.num_hidden_layers, config.intermediate_size
        (32, 6, 3072)
    """

    model_type = "distilbert"
    attribute_map = {
        "hidden_size": "dim",
        "num_attention_heads": "n_heads",
        "num_hidden_layers": "n_layers",
        # js's aliases: the skeleton reads BERT's names
        "intermediate_size": "hidden_dim",
        "hidden_act": "activation",
        "hidden_dropout_prob": "dropout",
        "attention_probs_dropout_prob": "attention_dropout",
    }
    layer_norm_eps: ClassVar[float] = 1e-12  # fixed in transformers (not a config.json key)
    # BERT's encoder keys land on their DistilBERT names through attribute_map


class DistilBertEmbeddings(TextEmbeddings):
    """Word + position embeddings (``0..L-1``), LayerNorm and dropout (``TextEmbeddings``);
    with ``sinusoidal_pos_embds`` the position table starts as transformers' sinusoids."""

    position_embeddings: nn.Embedding  # [max_position_embeddings, dim], built by TextEmbeddings

    def __init__(self, config: DistilBertConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        if config.sinusoidal_pos_embds:
            table = self.position_embeddings.weight
            table.value = _sinusoids(*table.value.shape).astype(table.value.dtype)


def _sinusoids(positions: int, dim: int) -> np.ndarray:
    """transformers' ``create_sinusoidal_embeddings``: ``sin`` at even features, ``cos`` at
    odd ones, of ``pos / 10000 ** (2 * (j // 2) / dim)``."""
    j = np.arange(dim)
    angles = np.arange(positions)[:, None] / np.power(10000, 2 * (j // 2) / dim)  # [P, dim]
    return np.where(j % 2 == 0, np.sin(angles), np.cos(angles))


class DistilBertSelfAttention(EncoderSelfAttention):
    """transformers' ``DistilBertSelfAttention``: ``q_lin``/``k_lin``/``v_lin``, attention,
    ``out_lin``."""

    projection_names = ("q_lin", "k_lin", "v_lin", "out_lin")


class DistilBertFFN(Module):
    """``dropout(lin2(act(lin1(x))))``, hidden -> ``hidden_dim`` -> hidden."""

    def __init__(self, config: DistilBertConfig, *, rngs: Rngs):
        super().__init__()
        self.dropout = nn.Dropout(config.dropout)
        self.lin1 = nn.Linear(config.dim, config.hidden_dim, rngs=rngs)
        self.lin2 = nn.Linear(config.hidden_dim, config.dim, rngs=rngs)
        self.activation = activation(config.owner(), "activation", config.activation)

    def forward(self, hidden_states: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        hidden = self.lin2(self.activation(self.lin1(hidden_states)))
        return self.dropout(hidden, rngs=rngs)


class DistilBertLayer(Module):
    """transformers' ``TransformerBlock``: ``sa_layer_norm(x + attention(x))``, then
    ``output_layer_norm(x + ffn(x))``."""

    def __init__(self, config: DistilBertConfig, *, rngs: Rngs):
        super().__init__()
        self.attention = DistilBertSelfAttention(config, rngs=rngs)
        self.sa_layer_norm = config.make_norm(config.dim)
        self.ffn = DistilBertFFN(config, rngs=rngs)
        self.output_layer_norm = config.make_norm(config.dim)

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        x = self.sa_layer_norm(self.attention(hidden_states, mask, rngs=rngs) + hidden_states)
        return self.output_layer_norm(self.ffn(x, rngs=rngs) + x)


class DistilBertTransformer(Encoder):
    """transformers' ``Transformer``: the ``n_layers`` blocks in ``layer``."""

    layer_class = DistilBertLayer


class DistilBertPreTrainedModel(BertPreTrainedModel):
    """What every DistilBERT model shares: BERT's ``forward`` and file rules, DistilBERT's
    config and prefix (``distilbert``)."""

    config_class = DistilBertConfig
    base_model_prefix = "distilbert"


class DistilBertModel(EncoderModel, DistilBertPreTrainedModel):
    """The DistilBERT encoder: ``embeddings`` and ``transformer``; no pooler (the pooled
    output is None)."""

    embeddings_class = DistilBertEmbeddings
    encoder_class = DistilBertTransformer
    encoder_name = "transformer"
    pooler_class = None


class DistilBertForMaskedLM(heads.EncoderHeadModel, DistilBertPreTrainedModel):
    """DistilBERT with ``vocab_transform``, the activation, ``vocab_layer_norm`` and
    ``vocab_projector`` (its weight the word embeddings' with ``tie_word_embeddings``): logits
    ``[B, L, vocab_size]``."""

    def __init__(self, config: DistilBertConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        words, H = self.base_model.embeddings.word_embeddings, config.dim
        self.activation = activation(config.owner(), "activation", config.activation)
        self.vocab_transform = nn.Linear(H, H, rngs=rngs)
        self.vocab_layer_norm = config.make_norm(H)
        self.vocab_projector, _ = heads.decoder_and_bias(config, H, words, rngs=rngs)

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The logits ``[B, L, vocab_size]``."""
        hidden = self.vocab_layer_norm(self.activation(self.vocab_transform(hidden)))
        return self.vocab_projector(hidden)


class DistilBertForSequenceClassification(heads.EncoderHeadModel, DistilBertPreTrainedModel):
    """DistilBERT with ``pre_classifier``, ReLU, dropout (``seq_classif_dropout``) and
    ``classifier`` on the first token: logits ``[B, num_labels]``."""

    def __init__(self, config: DistilBertConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.pre_classifier = nn.Linear(config.dim, config.dim, rngs=rngs)
        self.classifier = nn.Linear(config.dim, config.num_labels, rngs=rngs)
        self.dropout = nn.Dropout(config.seq_classif_dropout)

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The logits ``[B, num_labels]``."""
        first = F.relu(self.pre_classifier(hidden[:, 0]))  # [B, dim]
        return self.classifier(self.dropout(first, rngs=rngs))


class DistilBertForTokenClassification(
    heads.EncoderForTokenClassification, DistilBertPreTrainedModel
):
    """DistilBERT with ``dropout`` and ``classifier`` on every token: ``[B, L, num_labels]``."""


class DistilBertForQuestionAnswering(heads.EncoderForQuestionAnswering, DistilBertPreTrainedModel):
    """DistilBERT with dropout (``qa_dropout``) and ``qa_outputs``: ``(start_logits,
    end_logits)``, each ``[B, L]``."""

    def __init__(self, config: DistilBertConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.dropout = nn.Dropout(config.qa_dropout)

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """``(start_logits, end_logits)`` of the dropped-out states."""
        return super().outputs(self.dropout(hidden, rngs=rngs), pooled, rngs=rngs)


ARCHITECTURES = architectures(
    DistilBertModel,
    DistilBertForMaskedLM,
    DistilBertForSequenceClassification,
    DistilBertForTokenClassification,
    DistilBertForQuestionAnswering,
)
