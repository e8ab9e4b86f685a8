"""The embeddings of the BERT-family encoders without token types (DistilBERT, MPNet,
ModernBERT): words, learnt positions where the family has them, a norm and dropout.

They take BERT's embedding inputs (``BertPreTrainedModel.forward`` calls them as BERT's), and
refuse token types, which these families do not have.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

from js import Rngs, nn

from ._encoder import EncoderConfig
from .roberta import create_position_ids_from_input_ids


class TextEmbeddings(nn.Module):
    """``dropout(norm(words + positions))``: the word embeddings, learnt position embeddings
    (``0..L-1``, or with ``padding_idx`` RoBERTa's: counted from ``padding_idx + 1`` over the
    non-padding tokens, padding at ``padding_idx``) where the family has a position table, a
    norm (``make_norm``) and dropout (``hidden_dropout_prob``).

    Shape:
        ``input_ids``, ``position_ids`` ``[B, L]`` ints (or ``inputs_embeds`` ``[B, L, H]``) ->
        ``[B, L, H]``.
    """

    # transformers' names of the word table, the position table (None: none, ModernBERT's
    # positions are rotary), the norm and the dropout
    names: ClassVar[tuple[str, str | None, str, str]] = (
        "word_embeddings",
        "position_embeddings",
        "LayerNorm",
        "dropout",
    )
    # MPNet's 1: the padding row of both tables, before the first token's position; None: the
    # word table's padding row is pad_token_id and positions are 0..L-1
    padding_idx: ClassVar[int | None] = None

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__()
        words, positions, norm, dropout = self.names
        H, pad = config.hidden_size, self.padding_idx
        word_pad = config.pad_token_id if pad is None else pad
        setattr(self, words, nn.Embedding(config.vocab_size, H, padding_idx=word_pad, rngs=rngs))
        if positions is not None:
            table = nn.Embedding(config.max_position_embeddings, H, padding_idx=pad, rngs=rngs)
            setattr(self, positions, table)
        setattr(self, norm, config.make_norm(H))
        setattr(self, dropout, nn.Dropout(config.hidden_dropout_prob))
        self.owner = config.owner()
        # the first position a token takes, and how many tokens the table has positions for
        self.first = 0 if pad is None else pad + 1
        self.max_tokens = config.max_position_embeddings - self.first

    def forward(
        self,
        input_ids: jax.Array | None,
        token_type_ids: jax.Array | None,
        position_ids: jax.Array | None,
        inputs_embeds: jax.Array | None,
        *,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        words, positions, norm, dropout = self.names
        self._refuse(token_type_ids, position_ids)
        embeds = getattr(self, words)(input_ids) if inputs_embeds is None else inputs_embeds
        if positions is not None:
            position_ids = self._positions(input_ids, position_ids, embeds.shape[1])
            embeds = embeds + getattr(self, positions)(position_ids)
        return getattr(self, dropout)(getattr(self, norm)(embeds), rngs=rngs)  # [B, L, H]

    def _refuse(self, token_type_ids: jax.Array | None, position_ids: jax.Array | None) -> None:
        if token_type_ids is not None:
            raise ValueError(
                f"{self.owner}: token_type_ids were given, but the model has no token types. "
                "Fix: leave them out (tokenizer(..., return_token_type_ids=False))"
            )
        if position_ids is not None and self.names[1] is None:
            raise NotImplementedError(
                f"{self.owner}: position_ids are not supported: the positions are rotary, "
                "0..L-1 as transformers' default. Fix: leave position_ids out"
            )

    def _positions(
        self, input_ids: jax.Array | None, position_ids: jax.Array | None, length: int
    ) -> jax.Array:
        """The given ``position_ids``, else the defaults ``[B or 1, L]`` (within the table)."""
        if position_ids is not None:
            return position_ids
        if length > self.max_tokens:
            raise ValueError(
                f"{self.owner}: {length} tokens, but the position table holds positions for "
                f"{self.max_tokens} (max_position_embeddings less the first position "
                f"{self.first}). Fix: truncate the input to {self.max_tokens} tokens"
            )
        if self.padding_idx is not None and input_ids is not None:
            return create_position_ids_from_input_ids(input_ids, self.padding_idx)
        return jnp.arange(self.first, self.first + length)[None]  # consecutive: [1, L]


__all__ = ["TextEmbeddings"]
