"""The embeddings of the BERT-family encoders: words, learnt positions where the family has
them, token types where it has them (BERT, RoBERTa, ELECTRA), a norm and dropout.

They take BERT's embedding inputs (``BertPreTrainedModel.forward`` calls them), and a family
without token types (DistilBERT, MPNet, ModernBERT) refuses them.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

from js import Rngs, nn

from ._encoder import EncoderConfig


def create_position_ids_from_input_ids(input_ids: jax.Array, padding_idx: int) -> jax.Array:
    """Each token's position: ``padding_idx + 1`` onwards, counting only non-padding tokens;
    a padding token gets ``padding_idx`` (transformers' function of the same name, RoBERTa's
    and MPNet's positions).

    Example:
        >>> import jax.numpy as jnp
        >>> create_position_ids_from_input_ids(jnp.array([[0, 7, 9, 2, 1, 1]]), 1).tolist()
        [[2, 3, 4, 5, 1, 1]]
    """
    mask = (input_ids != padding_idx).astype(jnp.int32)  # [B, L]
    return jnp.cumsum(mask, axis=1) * mask + padding_idx


class TextEmbeddings(nn.Module):
    """``dropout(norm(words + token types + positions))``: the word embeddings, a token-type
    table where the family has one (``token_type_name``; types default to 0), learnt position
    embeddings where the family has a position table (``0..L-1``, or with a padding index
    (``position_padding``) RoBERTa's: counted from it + 1 over the non-padding tokens, padding
    at the padding index), a norm (``make_norm``) and dropout (``hidden_dropout_prob``), at
    ``embedding_size`` where the config has one (ELECTRA), else ``hidden_size``.

    Shape:
        ``input_ids``, ``token_type_ids``, ``position_ids`` ``[B, L]`` ints (or
        ``inputs_embeds`` ``[B, L, H]``) -> ``[B, L, H]``.
    """

    # transformers' names of the word table, the position table (None: none, ModernBERT's
    # positions are rotary), the norm and the dropout
    names: ClassVar[tuple[str, str | None, str, str]] = (
        "word_embeddings",
        "position_embeddings",
        "LayerNorm",
        "dropout",
    )
    # the token-type table's name (BERT's token_type_embeddings); None: no token types
    token_type_name: ClassVar[str | None] = None

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__()
        words, positions, norm, dropout = self.names
        H, pad = (
            getattr(config, "embedding_size", config.hidden_size),
            self.position_padding(config),
        )
        word_pad = config.pad_token_id if pad is None else pad
        setattr(self, words, nn.Embedding(config.vocab_size, H, padding_idx=word_pad, rngs=rngs))
        if positions is not None:
            table = nn.Embedding(config.max_position_embeddings, H, padding_idx=pad, rngs=rngs)
            setattr(self, positions, table)
        if self.token_type_name is not None:
            types = nn.Embedding(config.type_vocab_size, H, rngs=rngs)
            setattr(self, self.token_type_name, types)
        setattr(self, norm, config.make_norm(H))
        setattr(self, dropout, nn.Dropout(config.hidden_dropout_prob))
        self.owner, self.padding_idx = config.owner(), pad
        # the first position a token takes, and the table's size
        self.first, self.max_positions = (
            0 if pad is None else pad + 1,
            config.max_position_embeddings,
        )

    def position_padding(self, config: EncoderConfig) -> int | None:
        """The position table's padding row, before the first token's position (RoBERTa's
        ``pad_token_id``, MPNet's 1); None: positions are ``0..L-1``."""
        return None

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
        B, L = embeds.shape[:2]  # embeds [B, L, H]
        if self.token_type_name is not None:
            types = jnp.zeros((B, L), jnp.int32) if token_type_ids is None else token_type_ids
            embeds = embeds + getattr(self, self.token_type_name)(types)
        if positions is not None:
            position_ids = self._positions(input_ids, position_ids, L)
            embeds = embeds + getattr(self, positions)(position_ids)
        return getattr(self, dropout)(getattr(self, norm)(embeds), rngs=rngs)  # [B, L, H]

    def _refuse(self, token_type_ids: jax.Array | None, position_ids: jax.Array | None) -> None:
        if token_type_ids is not None and self.token_type_name is None:
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
        limit, first = self.max_positions - self.first, self.first
        if length > limit:
            past = f" less the {first} positions before the first token" if first else ""
            raise ValueError(
                f"{self.owner}: sequence length {length} exceeds max_position_embeddings="
                f"{self.max_positions}{past}. Fix: truncate the input to {limit} tokens"
            )
        if position_ids is not None:
            return position_ids
        if self.padding_idx is not None and input_ids is not None:
            return create_position_ids_from_input_ids(input_ids, self.padding_idx)
        return jnp.arange(first, first + length)[None]  # consecutive: [1, L]


__all__ = ["TextEmbeddings", "create_position_ids_from_input_ids"]
