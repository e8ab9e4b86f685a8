"""BERT (Devlin et al., 2018) as transformers 5.23 builds it: ``BertModel`` and its heads
(``BertForSequenceClassification``, ``BertForTokenClassification``,
``BertForQuestionAnswering``, ``BertForMaskedLM``), loading Hugging Face ``model_type: "bert"``
folders.

Module names are transformers' (``embeddings.LayerNorm``, ``encoder.layer.N.attention.self.
query``, ``pooler.dense``), which are also the keys of its files: transformers 5 did not rename
BERT's modules, so files load without renaming. ``key_mapping`` covers the one older spelling
transformers still accepts (TensorFlow-era ``LayerNorm.gamma``/``beta``), and ``ignore_on_load``
the ``position_ids`` buffer files written before transformers 4.31 carry.

The blocks are the encoder skeleton's (``_encoder.py``) in its post-norm arrangement and the
heads its ``_encoder_heads.py``; this file holds BERT's config, embeddings, token inputs and
masked-LM head, which RoBERTa and ELECTRA build on.

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

from . import _encoder_heads as heads
from ._base import architectures
from ._encoder import EncoderConfig, EncoderModel, EncoderPreTrainedModel
from ._hf import check_tokens
from ._text_embeddings import TextEmbeddings

__all__ = [
    "ARCHITECTURES",
    "BertConfig",
    "BertEmbeddings",
    "BertForMaskedLM",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertPreTrainedModel",
]


class BertConfig(EncoderConfig):
    """A BERT ``config.json``: transformers' ``BertConfig`` keys and defaults (bert-base; the
    encoder's are ``EncoderConfig``'s).

    Example:
        >>> config = BertConfig(hidden_size=32, num_attention_heads=4, num_labels=3)
        >>> config.intermediate_size, config.num_labels
        (3072, 3)
    """

    model_type = "bert"

    def validate(self) -> None:
        """What this port does not build (BERT as a decoder, relative positions), refused
        before any layer is made, then the encoder's checks."""
        for key in ("is_decoder", "add_cross_attention"):
            if getattr(self, key, False):
                raise NotImplementedError(
                    f"{self.owner()}: {key}=True (BERT as a decoder) is not implemented; js.models "
                    f"ports the encoder. Fix: set {key} to false in config.json"
                )
        kind = getattr(self, "position_embedding_type", "absolute")
        if kind != "absolute":
            raise NotImplementedError(
                f"{self.owner()}: position_embedding_type={kind!r} is not implemented "
                "(transformers 5 dropped relative position embeddings too). Fix: use an "
                "'absolute' checkpoint"
            )
        super().validate()


class BertEmbeddings(TextEmbeddings):
    """Word + position + token-type embeddings, then LayerNorm and dropout (``TextEmbeddings``
    with BERT's token-type table), at ``embedding_size`` where the config has one (ELECTRA),
    else ``hidden_size``.

    Args:
        config: a ``BertConfig`` (or a RoBERTa or ELECTRA config).
        rngs: ``js.Rngs`` with a ``params`` stream.

    Shape:
        ``input_ids``, ``token_type_ids``, ``position_ids`` ``[B, L]`` ints -> ``[B, L, H]``.
    """

    token_type_name = "token_type_embeddings"
    position_ids: Buffer  # [1, max_position_embeddings] int, 0..max-1 (not saved)
    token_type_ids: Buffer  # [1, max_position_embeddings] int, zeros (not saved)

    def __init__(self, config: BertConfig, *, rngs: Rngs, position_padding_idx: None = None):
        if position_padding_idx is not None:
            raise TypeError(
                "BertEmbeddings: position_padding_idx is no longer an argument. Fix: subclass "
                "and return it from position_padding(self, config), as RobertaEmbeddings does"
            )
        super().__init__(config, rngs=rngs)
        # transformers' non-persistent buffers (not in its files): [1, max_positions] each
        positions = np.arange(config.max_position_embeddings)[None]
        self.register_buffer("position_ids", positions, persistent=False)
        self.register_buffer("token_type_ids", np.zeros_like(positions), persistent=False)


def _padding_mask(owner: str, attention_mask: Any, shape: tuple[int, int]) -> jax.Array | None:
    """transformers' ``attention_mask`` ``[B, L]`` (1 = token, 0 = padding) -> the boolean
    key mask ``[B, 1, 1, L]`` (True = attend), or None for no mask."""
    if attention_mask is None:
        return None
    mask = jnp.asarray(attention_mask)
    if mask.shape != shape:
        raise ValueError(
            f"{owner}: attention_mask must be [batch, seq_len] = {list(shape)} like "
            f"input_ids, got {list(mask.shape)}. Fix: pass the tokenizer's attention_mask "
            "(1 for tokens, 0 for padding)"
        )
    return padding_mask(mask != 0)  # [B, 1, 1, L]


class BertPreTrainedModel(EncoderPreTrainedModel):
    """What every BERT model shares: its config class, prefix, file-name rules and
    ``forward`` (token ids in; each model's ``outputs`` out). RoBERTa and ELECTRA models
    share them too, with their own config class and prefix."""

    config: BertConfig
    config_class = BertConfig
    base_model_prefix = "bert"
    # transformers' "legacy" renamings (conversion_mapping.py), still applied on load in 5.23
    key_mapping = {
        r"LayerNorm\.gamma": "LayerNorm.weight",
        r"LayerNorm\.beta": "LayerNorm.bias",
    }
    # Files from transformers < 4.31 hold the position_ids buffer; transformers ignores it.
    ignore_on_load: ClassVar[tuple[str, ...]] = (r"(^|\.)position_ids$",)

    def forward(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        token_type_ids: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        inputs_embeds: jax.Array | None = None,
        *,
        rngs: Rngs | None = None,
    ) -> Any:
        """Encode a batch (``BertModel``) or run a head on it (``BertFor...``).

        Args:
            input_ids: token ids ``[B, L]`` (or give ``inputs_embeds [B, L, H]`` instead).
            attention_mask: ``[B, L]``, 1 for tokens and 0 for padding (default: all tokens).
                Padding is masked as a key; padded positions still get (unused) outputs.
            token_type_ids: segment ids ``[B, L]`` (default: all 0).
            position_ids: ``[B, L]`` or ``[1, L]`` (default: ``0..L-1``).
            inputs_embeds: word embeddings to use instead of looking ``input_ids`` up.
            rngs: a ``dropout`` stream, needed in training mode only.

        Returns:
            ``BertModel``: ``(last_hidden_state [B, L, H], pooler_output [B, H])``,
            pooler_output None for a model built with ``add_pooling_layer=False``;
            ``BertForSequenceClassification``: logits ``[B, num_labels]``;
            ``BertForTokenClassification``: logits ``[B, L, num_labels]``;
            ``BertForQuestionAnswering``: ``(start_logits [B, L], end_logits [B, L])``;
            ``BertForMaskedLM``: logits ``[B, L, vocab_size]``.
        """
        owner = self.config.owner()
        input_ids, inputs_embeds = check_tokens(owner, input_ids, inputs_embeds)
        given = inputs_embeds if input_ids is None else input_ids
        assert given is not None  # check_tokens returns exactly one
        B, L = given.shape[:2]
        mask = _padding_mask(owner, attention_mask, (B, L))
        hidden = self.base_model.embeddings(
            input_ids, token_type_ids, position_ids, inputs_embeds, rngs=rngs
        )  # [B, L, H]
        return self.from_embeddings(hidden, mask, rngs=rngs)


class BertModel(EncoderModel, BertPreTrainedModel):
    """The BERT encoder: embeddings, ``num_hidden_layers`` post-LayerNorm blocks and, with
    ``add_pooling_layer``, the pooler (``tanh(dense(h[:, 0]))``).

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

    embeddings_class = BertEmbeddings


class BertForSequenceClassification(heads.EncoderForSequenceClassification, BertPreTrainedModel):
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
        ...                     num_attention_heads=2, intermediate_size=16,
        ...                     id2label={0: "negative", 1: "positive"})
        >>> model = BertForSequenceClassification(config, rngs=js.Rngs(params=0)).eval()
        >>> ids, mask = jnp.array([[2, 5, 7], [2, 9, 0]]), jnp.array([[1, 1, 1], [1, 1, 0]])
        >>> logits = model(ids, attention_mask=mask)
        >>> logits.shape, model.config.id2label[1]
        ((2, 2), 'positive')
    """


class BertForTokenClassification(heads.EncoderForTokenClassification, BertPreTrainedModel):
    """BERT (no pooler) with ``dropout`` and a linear ``classifier`` on every token: logits
    ``[B, L, num_labels]`` (``EncoderForTokenClassification``)."""


class BertForQuestionAnswering(heads.EncoderForQuestionAnswering, BertPreTrainedModel):
    """BERT (no pooler) with ``qa_outputs``: ``(start_logits, end_logits)``, each ``[B, L]``
    (``EncoderForQuestionAnswering``)."""


class BertLMPredictionHead(nn.Module):
    """transformers' ``cls.predictions``: ``transform`` (dense, ``hidden_act``, LayerNorm),
    then ``decoder`` to the vocabulary with the head's ``bias`` (see ``decoder_and_bias``)."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding, *, rngs: Rngs):
        super().__init__()
        self.transform = heads.PredictionTransform(config, config.hidden_act, rngs=rngs)
        H = config.hidden_size
        self.decoder, self.bias = heads.decoder_and_bias(config, H, word_embeddings, rngs=rngs)

    def forward(self, hidden_states: jax.Array) -> jax.Array:
        return self.decoder(self.transform(hidden_states))  # [B, L, vocab_size]


class BertOnlyMLMHead(nn.Module):
    """transformers' ``cls``: the ``predictions`` head."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding, *, rngs: Rngs):
        super().__init__()
        self.predictions = BertLMPredictionHead(config, word_embeddings, rngs=rngs)

    def forward(self, sequence_output: jax.Array) -> jax.Array:
        return self.predictions(sequence_output)


class BertForMaskedLM(heads.EncoderForMaskedLM, BertPreTrainedModel):
    """BERT (no pooler) with the masked-LM head ``cls``: logits ``[B, L, vocab_size]``, the
    decoder's weight the word embeddings' with ``tie_word_embeddings`` (transformers' default)."""

    lm_head_class = BertOnlyMLMHead
    lm_head_name = "cls"


ARCHITECTURES = architectures(
    BertModel,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertForQuestionAnswering,
    BertForMaskedLM,
)
