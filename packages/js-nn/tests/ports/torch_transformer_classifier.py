"""A TransformerEncoder text classifier in PyTorch, written the way PyTorch's "Language
Modeling with nn.Transformer" tutorial writes its model and ``PositionalEncoding`` (here
``batch_first=True``, a padding mask, mean pooling over the valid tokens and a Linear head):
the reference for ``transformer_classifier.py``."""

import math

import torch
import torch.nn as nn
from torch import Tensor


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)

        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(1, max_len, d_model)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x: Tensor) -> Tensor:
        """x: [batch_size, seq_len, embedding_dim]"""
        x = x + self.pe[:, : x.size(1)]
        return self.dropout(x)


class TransformerClassifier(nn.Module):
    def __init__(self, ntoken, d_model, nhead, d_hid, nlayers, nclass, dropout=0.5, pad_idx=0):
        super().__init__()
        self.embedding = nn.Embedding(ntoken, d_model, padding_idx=pad_idx)
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        encoder_layers = nn.TransformerEncoderLayer(
            d_model, nhead, d_hid, dropout, batch_first=True
        )
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers)
        self.classifier = nn.Linear(d_model, nclass)
        self.d_model = d_model

    def forward(self, src: Tensor, src_key_padding_mask: Tensor) -> Tensor:
        """src: [batch, seq] token ids; src_key_padding_mask: [batch, seq], True = padding."""
        x = self.embedding(src) * math.sqrt(self.d_model)
        x = self.pos_encoder(x)
        x = self.transformer_encoder(x, src_key_padding_mask=src_key_padding_mask)
        keep = (~src_key_padding_mask).unsqueeze(-1).float()
        x = (x * keep).sum(1) / keep.sum(1)  # mean over the valid tokens
        return self.classifier(x)
