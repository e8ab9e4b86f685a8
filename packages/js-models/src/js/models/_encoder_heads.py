"""The heads transformers puts on the BERT family's encoders, written once for every family.

A family's head model is a declaration: the head class here, then the family's
``PreTrainedModel`` (its config, prefix and ``forward``), e.g.::

    class RobertaForTokenClassification(EncoderForTokenClassification, RobertaPreTrainedModel):
        \"\"\"...\"\"\"

The head builds the family's base model (``base_model_class``, at ``base_model_prefix``; with
the pooler only where the head reads it) and its modules under transformers' names, and turns
the base model's ``(last_hidden_state, pooler_output)`` into its outputs (``outputs``):

- ``EncoderForSequenceClassification``: logits ``[B, num_labels]``, from the pooled output
  through ``dropout`` and ``classifier`` (BERT), or, where the family names a
  ``classifier_activation``, from the first token through ``ClassificationHead`` (RoBERTa,
  ELECTRA);
- ``EncoderForTokenClassification``: ``dropout`` and ``classifier`` on every position, logits
  ``[B, L, num_labels]``;
- ``EncoderForQuestionAnswering``: ``qa_outputs`` on every position, split into
  ``(start_logits [B, L], end_logits [B, L])``;
- ``EncoderForMaskedLM``: the family's masked-LM modules (``lm_head``: a
  ``PredictionTransform`` and a ``decoder`` to the vocabulary, its weight the word embeddings'
  with ``tie_word_embeddings``, see ``decoder_and_bias``), logits ``[B, L, vocab_size]``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from js import Module, Parameter, Rngs, nn

from ._encoder import EncoderConfig, EncoderPreTrainedModel
from ._hf import activation


def classifier_dropout(config: EncoderConfig) -> float:
    """A classifier's dropout: ``classifier_dropout``, else ``hidden_dropout_prob``."""
    p = getattr(config, "classifier_dropout", None)
    return config.hidden_dropout_prob if p is None else p


def decoder_and_bias(
    config: EncoderConfig, in_features: int, word_embeddings: nn.Embedding, *, rngs: Rngs
) -> tuple[nn.Linear, Parameter]:
    """A masked-LM ``decoder`` (``Linear(in_features, vocab_size)``) and the head's ``bias``.

    With ``tie_word_embeddings`` (transformers' default) the decoder's weight is the word
    embeddings' and the head's ``bias`` is the decoder's (one Parameter each, written once, at
    transformers' names: the embedding's and the head's ``bias``); without it both are the
    decoder's own and the head keeps a separate ``bias``, as transformers does.
    """
    decoder = nn.Linear(in_features, config.vocab_size, rngs=rngs)
    assert decoder.bias is not None  # a biased Linear
    if not getattr(config, "tie_word_embeddings", True):
        return decoder, Parameter(jnp.zeros((config.vocab_size,), decoder.bias.value.dtype))
    decoder.weight = word_embeddings.weight
    return decoder, decoder.bias


class PredictionTransform(Module):
    """``norm(act(dense(x)))``: hidden -> ``out_features`` (default hidden), the norm at
    ``norm_name`` (BERT's ``cls.predictions.transform``, ELECTRA's ``generator_predictions``;
    RoBERTa's ``lm_head`` is one with its decoder).

    Shape:
        ``[B, L, hidden]`` -> ``[B, L, out_features]``.
    """

    norm_name: ClassVar[str] = "LayerNorm"

    def __init__(
        self, config: EncoderConfig, act: str, *, out_features: int | None = None, rngs: Rngs
    ):
        super().__init__()
        size = config.hidden_size if out_features is None else out_features
        self.dense = nn.Linear(config.hidden_size, size, rngs=rngs)
        self.transform_act_fn = activation(config.owner(), "hidden_act", act)
        setattr(self, self.norm_name, config.make_norm(size))

    def forward(self, hidden_states: jax.Array) -> jax.Array:
        hidden = self.transform_act_fn(self.dense(hidden_states))
        return getattr(self, self.norm_name)(hidden)


class ClassificationHead(Module):
    """transformers' ``RobertaClassificationHead``: the first token's state through dropout,
    ``dense``, ``act``, dropout and ``out_proj`` to ``num_labels`` logits.

    Shape:
        ``[B, L, hidden]`` -> ``[B, num_labels]``.
    """

    def __init__(self, config: EncoderConfig, act: str, *, rngs: Rngs):
        super().__init__()
        H = config.hidden_size
        self.dense = nn.Linear(H, H, rngs=rngs)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.out_proj = nn.Linear(H, config.num_labels, rngs=rngs)
        self.act = activation(config.owner(), "classifier_activation", act)

    def forward(self, features: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        x = self.act(self.dense(self.dropout(features[:, 0], rngs=rngs)))  # [B, hidden]
        return self.out_proj(self.dropout(x, rngs=rngs))


class EncoderHeadModel(EncoderPreTrainedModel):
    """The family's base model (``base_model_class`` at ``base_model_prefix``), built with a
    pooler where ``add_pooling_layer()`` says; a head class adds its modules after it."""

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__(config)
        base = self.base_model_class(config, self.add_pooling_layer(), rngs=rngs)
        setattr(self, self.base_model_prefix, base)

    def add_pooling_layer(self) -> bool:
        """Whether the head reads the pooled output (transformers builds no pooler otherwise)."""
        return False


class EncoderForSequenceClassification(EncoderHeadModel):
    """A sequence classifier: ``num_labels`` logits ``[B, num_labels]`` from the pooled output
    (``dropout``, linear ``classifier``: BERT) or, where the family sets
    ``classifier_activation``, from the first token's state (``classifier``, a
    ``ClassificationHead``: RoBERTa's tanh, ELECTRA's gelu). ``classifier_dropout`` (else
    ``hidden_dropout_prob``) is the head's dropout."""

    classifier_activation: ClassVar[str | None] = None

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        act, H = self.classifier_activation, config.hidden_size
        if act is not None:
            self.classifier = ClassificationHead(config, act, rngs=rngs)
        else:
            self.dropout = nn.Dropout(classifier_dropout(config))
            self.classifier = nn.Linear(H, config.num_labels, rngs=rngs)

    def add_pooling_layer(self) -> bool:
        return self.classifier_activation is None

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The logits ``[B, num_labels]``."""
        if self.classifier_activation is not None:
            return self.classifier(hidden, rngs=rngs)
        return self.classifier(self.dropout(pooled, rngs=rngs))


class EncoderForTokenClassification(EncoderHeadModel):
    """A token classifier: ``dropout`` (``classifier_dropout``, else ``hidden_dropout_prob``)
    and a linear ``classifier`` on every position's state, logits ``[B, L, num_labels]``."""

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels, rngs=rngs)

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The logits ``[B, L, num_labels]``."""
        return self.classifier(self.dropout(hidden, rngs=rngs))


class EncoderForQuestionAnswering(EncoderHeadModel):
    """Extractive question answering: ``qa_outputs`` (hidden -> ``num_labels`` = 2) on every
    position, split into ``(start_logits [B, L], end_logits [B, L])``."""

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        if config.num_labels != 2:
            raise ValueError(
                f"{type(self).__name__}: num_labels={config.num_labels}, but the head gives "
                "start and end logits. Fix: set num_labels to 2 (or drop id2label)"
            )
        super().__init__(config, rngs=rngs)
        self.qa_outputs = nn.Linear(config.hidden_size, 2, rngs=rngs)

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """``(start_logits, end_logits)``, each ``[B, L]``."""
        logits = self.qa_outputs(hidden)  # [B, L, 2]
        return logits[..., 0], logits[..., 1]


class EncoderForMaskedLM(EncoderHeadModel):
    """A masked language model: the family's ``lm_head`` modules, applied in order to the
    last hidden state, give logits ``[B, L, vocab_size]``. By default that is one module,
    ``lm_head_class(config, word_embeddings, rngs=rngs)`` at ``lm_head_name``."""

    lm_head_class: ClassVar[type[Any]]  # built as lm_head_class(config, word_embeddings, rngs=)
    lm_head_name: ClassVar[str] = "lm_head"

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        modules = self.lm_head(config, self.base_model.embeddings.word_embeddings, rngs=rngs)
        self.lm_head_names = tuple(modules)
        for name, module in modules.items():
            setattr(self, name, module)

    def lm_head(
        self, config: EncoderConfig, word_embeddings: nn.Embedding, *, rngs: Rngs
    ) -> dict[str, Module]:
        """The family's head modules by transformers' names, in the order they apply (the
        decoder tied to ``word_embeddings`` through ``decoder_and_bias``)."""
        return {self.lm_head_name: self.lm_head_class(config, word_embeddings, rngs=rngs)}

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The logits ``[B, L, vocab_size]``."""
        for name in self.lm_head_names:
            hidden = getattr(self, name)(hidden)
        return hidden


__all__ = [
    "ClassificationHead",
    "EncoderForMaskedLM",
    "EncoderForQuestionAnswering",
    "EncoderForSequenceClassification",
    "EncoderForTokenClassification",
    "EncoderHeadModel",
    "PredictionTransform",
    "classifier_dropout",
    "decoder_and_bias",
]
