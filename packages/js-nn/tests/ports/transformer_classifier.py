"""The TransformerEncoder classifier of ``torch_transformer_classifier.py``, ported to js.
Changes, marked ``# port:`` (listed in docs/porting.md):

1. Imports: ``js.nn`` for ``torch.nn``; ``jax.numpy`` for the tensor functions
   (``torch.arange/exp/sin/cos/zeros``), ``jax.Array`` for ``Tensor``.
2. ``rngs``: the constructor takes ``rngs``; ``forward`` takes ``rngs`` for dropout in
   training and passes it to every layer that drops.
3. The buffer is built functionally: ``pe[0, :, 0::2] = ...`` -> ``pe.at[0, :, 0::2].set(...)``
   (JAX arrays are immutable); ``.unsqueeze(1)`` -> ``[:, None]``; ``x.size(1)`` ->
   ``x.shape[1]``; ``.float()`` -> ``.astype(x.dtype)``.
4. The mask: ``src_key_padding_mask=pad`` (True = padding) -> ``mask=padding_mask(~pad)``
   (js's True = may attend).
"""

import math

import jax.numpy as jnp  # port: was `import torch`
from jax import Array as Tensor  # port: was `from torch import Tensor`

import js
import js.nn as nn  # port: was `import torch.nn as nn`
from js.nn.attention import padding_mask  # port: js's mask polarity


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)

        position = jnp.arange(max_len)[:, None]  # port: was `.unsqueeze(1)`
        div_term = jnp.exp(jnp.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = jnp.zeros((1, max_len, d_model))
        pe = pe.at[0, :, 0::2].set(jnp.sin(position * div_term))  # port: functional update
        pe = pe.at[0, :, 1::2].set(jnp.cos(position * div_term))
        self.register_buffer("pe", pe)

    def forward(self, x: Tensor, *, rngs=None) -> Tensor:  # port: rngs
        """x: [batch_size, seq_len, embedding_dim]"""
        x = x + self.pe[:, : x.shape[1]]  # port: was `x.size(1)`
        return self.dropout(x, rngs=rngs)


class TransformerClassifier(nn.Module):
    def __init__(
        self,
        ntoken,
        d_model,
        nhead,
        d_hid,
        nlayers,
        nclass,
        dropout=0.5,
        pad_idx=0,
        *,
        rngs: js.Rngs,
    ):
        super().__init__()
        self.embedding = nn.Embedding(ntoken, d_model, padding_idx=pad_idx, rngs=rngs)
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        encoder_layers = nn.TransformerEncoderLayer(
            d_model, nhead, d_hid, dropout, batch_first=True, rngs=rngs
        )
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers)
        self.classifier = nn.Linear(d_model, nclass, rngs=rngs)
        self.d_model = d_model

    def forward(self, src: Tensor, src_key_padding_mask: Tensor, *, rngs=None) -> Tensor:
        """src: [batch, seq] token ids; src_key_padding_mask: [batch, seq], True = padding."""
        x = self.embedding(src) * math.sqrt(self.d_model)
        x = self.pos_encoder(x, rngs=rngs)
        mask = padding_mask(~src_key_padding_mask)  # port: True = may attend
        x = self.transformer_encoder(x, mask=mask, rngs=rngs)
        keep = (~src_key_padding_mask)[..., None].astype(x.dtype)  # port: `.unsqueeze(-1).float()`
        x = (x * keep).sum(1) / keep.sum(1)  # mean over the valid tokens
        return self.classifier(x)
