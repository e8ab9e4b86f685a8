"""ELECTRA (Clark et al., 2020) as transformers 5.23 builds it, loading Hugging Face
``model_type: "electra"`` folders: discriminators and generators alike.

ELECTRA is BERT (``bert.py``: the blocks, token inputs and file rules) with its embeddings at
``embedding_size``, projected to ``hidden_size`` by ``embeddings_project`` where the two
differ, no pooler, and its own heads: the discriminator's ``discriminator_predictions``
(``ElectraForPreTraining``: one replaced-token logit per token), the generator's
``generator_predictions`` and ``generator_lm_head`` (``ElectraForMaskedLM``, the decoder tied to
the word embeddings) and a sequence ``classifier`` with gelu on the first token.
"""

from __future__ import annotations

from typing import Any

import jax

from js import Rngs, nn

from . import _encoder_heads as heads
from ._base import architectures
from ._encoder import EncoderConfig, EncoderModel
from ._hf import activation
from .bert import BertConfig, BertEmbeddings, BertPreTrainedModel

__all__ = [
    "ARCHITECTURES",
    "ElectraConfig",
    "ElectraDiscriminatorPredictions",
    "ElectraForMaskedLM",
    "ElectraForPreTraining",
    "ElectraForQuestionAnswering",
    "ElectraForSequenceClassification",
    "ElectraForTokenClassification",
    "ElectraModel",
    "ElectraPreTrainedModel",
]


class ElectraConfig(BertConfig):
    """An ELECTRA ``config.json``: transformers' ``ElectraConfig`` keys and defaults (BERT's at
    ELECTRA-small's sizes; ``embedding_size`` is the embeddings' width)."""

    model_type = "electra"


class ElectraPreTrainedModel(BertPreTrainedModel):
    """ELECTRA's discriminators and generators: BERT's token inputs and file rules, with
    ``ElectraConfig`` at the prefix ``electra``."""

    config_class = ElectraConfig
    base_model_prefix = "electra"


class ElectraModel(EncoderModel, ElectraPreTrainedModel):
    """The ELECTRA encoder: ``BertEmbeddings`` at ``embedding_size``, ``embeddings_project``
    (``Linear(embedding_size, hidden_size)``, only where they differ), BERT's blocks, no pooler
    (``add_pooling_layer`` builds none). Returns ``(last_hidden_state [B, L, H], None)``."""

    embeddings_class = BertEmbeddings
    pooler_class = None

    def __init__(self, config: ElectraConfig, add_pooling_layer: bool = True, *, rngs: Rngs):
        super().__init__(config, add_pooling_layer, rngs=rngs)
        E, H = config.embedding_size, config.hidden_size
        self.embeddings_project = nn.Linear(E, H, rngs=rngs) if E != H else None

    def encode(
        self, hidden: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None
    ) -> tuple[jax.Array, jax.Array | None]:
        """``EncoderModel.encode`` of the embeddings ``[B, L, embedding_size]``, projected to
        ``hidden_size`` first where ``embeddings_project`` is."""
        if self.embeddings_project is not None:
            hidden = self.embeddings_project(hidden)  # [B, L, H]
        return super().encode(hidden, mask, rngs=rngs)


class ElectraDiscriminatorPredictions(nn.Module):
    """``dense_prediction(act(dense(x)))``: one logit per token (``hidden_act``), whether the
    token was replaced.

    Shape:
        ``[B, L, hidden]`` -> ``[B, L]``.
    """

    def __init__(self, config: ElectraConfig, *, rngs: Rngs):
        super().__init__()
        H = config.hidden_size
        self.dense = nn.Linear(H, H, rngs=rngs)
        self.activation = activation(config.owner(), "hidden_act", config.hidden_act)
        self.dense_prediction = nn.Linear(H, 1, rngs=rngs)

    def forward(self, discriminator_hidden_states: jax.Array) -> jax.Array:
        hidden = self.activation(self.dense(discriminator_hidden_states))
        return self.dense_prediction(hidden)[..., 0]  # [B, L]


class ElectraForPreTraining(heads.EncoderHeadModel, ElectraPreTrainedModel):
    """The discriminator: ``ElectraModel`` and ``discriminator_predictions``, logits ``[B, L]``
    (positive: the token was replaced)."""

    def __init__(self, config: ElectraConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config, rngs=rngs)

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The replaced-token logits ``[B, L]``."""
        return self.discriminator_predictions(hidden)


class ElectraForMaskedLM(heads.EncoderForMaskedLM, ElectraPreTrainedModel):
    """The generator: ``ElectraModel``, ``generator_predictions`` (dense to
    ``embedding_size``, gelu, LayerNorm) and ``generator_lm_head`` to the vocabulary (its
    weight the word embeddings' with ``tie_word_embeddings``): logits ``[B, L, vocab_size]``."""

    def lm_head(
        self, config: EncoderConfig, word_embeddings: nn.Embedding, *, rngs: Rngs
    ) -> dict[str, nn.Module]:
        E = config.embedding_size
        transform = heads.PredictionTransform(config, "gelu", out_features=E, rngs=rngs)
        decoder, _ = heads.decoder_and_bias(config, E, word_embeddings, rngs=rngs)
        return {"generator_predictions": transform, "generator_lm_head": decoder}


class ElectraForTokenClassification(heads.EncoderForTokenClassification, ElectraPreTrainedModel):
    """ELECTRA with ``dropout`` and ``classifier`` on every token: ``[B, L, num_labels]``."""


class ElectraForQuestionAnswering(heads.EncoderForQuestionAnswering, ElectraPreTrainedModel):
    """ELECTRA with ``qa_outputs``: ``(start_logits, end_logits)``, each ``[B, L]``."""


class ElectraForSequenceClassification(
    heads.EncoderForSequenceClassification, ElectraPreTrainedModel
):
    """ELECTRA with ``classifier`` (dense, gelu, out_proj) on the first token: logits
    ``[B, num_labels]``."""

    classifier_activation = "gelu"


ARCHITECTURES = architectures(
    ElectraModel,
    ElectraForPreTraining,
    ElectraForMaskedLM,
    ElectraForSequenceClassification,
    ElectraForTokenClassification,
    ElectraForQuestionAnswering,
)
