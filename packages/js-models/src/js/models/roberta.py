"""RoBERTa (Liu et al., 2019) and XLM-RoBERTa (Conneau et al., 2019) as transformers 5.23
builds them, loading Hugging Face ``model_type: "roberta"`` and ``"xlm-roberta"`` folders.

RoBERTa is BERT (``bert.py``: the embeddings, blocks, token inputs and file rules) with two
differences: positions are counted from ``pad_token_id + 1`` over the non-padding tokens, the
padding tokens taking ``pad_token_id`` (fairseq's ``make_positions``,
``create_position_ids_from_input_ids``), and its heads are its own: the masked-LM ``lm_head``
(``dense``, gelu, ``layer_norm``, ``decoder`` tied to the word embeddings, ``bias``) and the
sequence classifier's ``classifier`` (``dense``, tanh, ``out_proj`` on the first token, without
a pooler). XLM-RoBERTa is RoBERTa under its own names and config (``XLMRoberta*``).
"""

from __future__ import annotations

import jax

from js import Rngs, nn

from . import _encoder_heads as heads
from ._base import architectures
from ._encoder import EncoderConfig, EncoderModel
from .bert import BertConfig, BertEmbeddings, BertPreTrainedModel

__all__ = [
    "ARCHITECTURES",
    "RobertaConfig",
    "RobertaEmbeddings",
    "RobertaForMaskedLM",
    "RobertaForQuestionAnswering",
    "RobertaForSequenceClassification",
    "RobertaForTokenClassification",
    "RobertaLMHead",
    "RobertaModel",
    "RobertaPreTrainedModel",
    "XLMRobertaConfig",
    "XLMRobertaForMaskedLM",
    "XLMRobertaForQuestionAnswering",
    "XLMRobertaForSequenceClassification",
    "XLMRobertaForTokenClassification",
    "XLMRobertaModel",
    "XLMRobertaPreTrainedModel",
]


class RobertaConfig(BertConfig):
    """A RoBERTa ``config.json``: transformers' ``RobertaConfig`` keys and defaults (BERT's,
    with RoBERTa's vocabulary and padding token)."""

    model_type = "roberta"


class XLMRobertaConfig(RobertaConfig):
    """An XLM-RoBERTa ``config.json`` (transformers' ``XLMRobertaConfig``: RoBERTa's keys, BERT's
    vocabulary size by default)."""

    model_type = "xlm-roberta"


class RobertaEmbeddings(BertEmbeddings):
    """BERT's embeddings with RoBERTa's positions: the position table's ``pad_token_id`` row is
    the padding's, tokens count from ``pad_token_id + 1`` (``inputs_embeds``: all tokens)."""

    def position_padding(self, config: EncoderConfig) -> int | None:
        return config.pad_token_id


class RobertaPreTrainedModel(BertPreTrainedModel):
    """BERT's ``forward`` and file rules for RoBERTa's (and XLM-RoBERTa's) models, under the
    prefix ``roberta``."""

    config_class = RobertaConfig
    base_model_prefix = "roberta"


class RobertaModel(EncoderModel, RobertaPreTrainedModel):
    """The RoBERTa encoder: ``BertModel`` with ``RobertaEmbeddings`` (see
    ``BertPreTrainedModel.forward``)."""

    embeddings_class = RobertaEmbeddings


class RobertaLMHead(heads.PredictionTransform):
    """transformers' ``lm_head``: ``dense``, gelu, ``layer_norm``, then ``decoder`` to the
    vocabulary with the head's ``bias`` (see ``decoder_and_bias``)."""

    norm_name = "layer_norm"

    def __init__(self, config: EncoderConfig, word_embeddings: nn.Embedding, *, rngs: Rngs):
        super().__init__(config, "gelu", rngs=rngs)
        H = config.hidden_size
        self.decoder, self.bias = heads.decoder_and_bias(config, H, word_embeddings, rngs=rngs)

    def forward(self, hidden_states: jax.Array) -> jax.Array:
        return self.decoder(super().forward(hidden_states))  # [B, L, vocab_size]


class RobertaForMaskedLM(heads.EncoderForMaskedLM, RobertaPreTrainedModel):
    """RoBERTa (no pooler) with ``lm_head``: logits ``[B, L, vocab_size]``."""

    lm_head_class = RobertaLMHead


class RobertaForSequenceClassification(
    heads.EncoderForSequenceClassification, RobertaPreTrainedModel
):
    """RoBERTa with its ``classifier`` (``ClassificationHead``, tanh) on the first token."""

    classifier_activation = "tanh"


class RobertaForTokenClassification(heads.EncoderForTokenClassification, RobertaPreTrainedModel):
    """RoBERTa with ``dropout`` and ``classifier`` on every token: ``[B, L, num_labels]``."""


class RobertaForQuestionAnswering(heads.EncoderForQuestionAnswering, RobertaPreTrainedModel):
    """RoBERTa with ``qa_outputs``: ``(start_logits, end_logits)``, each ``[B, L]``."""


class XLMRobertaPreTrainedModel(RobertaPreTrainedModel):
    """XLM-RoBERTa's models: RoBERTa's, with ``XLMRobertaConfig``."""

    config_class = XLMRobertaConfig


class XLMRobertaModel(XLMRobertaPreTrainedModel, RobertaModel):
    """XLM-RoBERTa's encoder (``RobertaModel``)."""


class XLMRobertaForMaskedLM(XLMRobertaPreTrainedModel, RobertaForMaskedLM):
    """XLM-RoBERTa with ``lm_head`` (``RobertaForMaskedLM``)."""


class XLMRobertaForSequenceClassification(
    XLMRobertaPreTrainedModel, RobertaForSequenceClassification
):
    """XLM-RoBERTa with its ``classifier`` (``RobertaForSequenceClassification``)."""


class XLMRobertaForTokenClassification(XLMRobertaPreTrainedModel, RobertaForTokenClassification):
    """XLM-RoBERTa with a token ``classifier`` (``RobertaForTokenClassification``)."""


class XLMRobertaForQuestionAnswering(XLMRobertaPreTrainedModel, RobertaForQuestionAnswering):
    """XLM-RoBERTa with ``qa_outputs`` (``RobertaForQuestionAnswering``)."""


ARCHITECTURES = architectures(
    RobertaModel,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaForQuestionAnswering,
    XLMRobertaModel,
    XLMRobertaForMaskedLM,
    XLMRobertaForSequenceClassification,
    XLMRobertaForTokenClassification,
    XLMRobertaForQuestionAnswering,
)
