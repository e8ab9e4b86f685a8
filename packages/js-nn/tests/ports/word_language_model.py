"""PyTorch's word-language-model ``RNNModel`` (pytorch/examples, ``word_language_model/
model.py``), ported to js; ``torch_word_language_model.py`` is the PyTorch side. Changes, marked
``# port:`` (listed in docs/porting.md):

1. Imports: ``js.nn`` and ``js.nn.functional`` for torch's; ``jax.numpy`` for ``new_zeros``.
2. ``rngs``: the constructor takes ``rngs`` (layers and ``init_weights``' draws); ``forward``
   takes ``rngs`` for dropout in training and passes it to ``drop`` and the recurrent layer.
3. ``batch_first=False`` passed to the recurrent layer: js defaults to True, PyTorch to False.
4. ``decoded.view(-1, n)`` -> ``decoded.reshape(-1, n)``; ``weight.new_zeros(...)`` ->
   ``jnp.zeros(..., weight.dtype)`` (``next(self.parameters())`` is a Parameter: ``.value``).
5. Weight tying (``self.decoder.weight = self.encoder.weight``) is not ported: untested here.
"""

import jax.numpy as jnp  # port: for `weight.new_zeros`

import js
import js.nn as nn  # port: was `import torch.nn as nn`
import js.nn.functional as F  # port: was `import torch.nn.functional as F`


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, *, rngs: js.Rngs):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp, rngs=rngs)
        if rnn_type in ["LSTM", "GRU"]:
            self.rnn = getattr(nn, rnn_type)(
                ninp,
                nhid,
                nlayers,
                dropout=dropout,
                batch_first=False,
                rngs=rngs,  # port
            )
        else:
            try:
                nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            except KeyError as e:
                raise ValueError("An invalid option for `--model` was supplied") from e
            self.rnn = nn.RNN(
                ninp,
                nhid,
                nlayers,
                nonlinearity=nonlinearity,
                dropout=dropout,
                batch_first=False,
                rngs=rngs,
            )
        self.decoder = nn.Linear(nhid, ntoken, rngs=rngs)

        self.init_weights(rngs)

        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self, rngs):  # port: rngs
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange, rngs=rngs)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange, rngs=rngs)

    def forward(self, input, hidden, *, rngs=None):  # port: rngs for dropout
        emb = self.drop(self.encoder(input), rngs=rngs)
        output, hidden = self.rnn(emb, hidden, rngs=rngs)
        output = self.drop(output, rngs=rngs)
        decoded = self.decoder(output)
        decoded = decoded.reshape(-1, self.ntoken)  # port: was `.view`
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(iter(self.parameters())).value  # port: `.value`, and iter()
        zeros = (self.nlayers, bsz, self.nhid)
        if self.rnn_type == "LSTM":
            return (jnp.zeros(zeros, weight.dtype), jnp.zeros(zeros, weight.dtype))  # port
        else:
            return jnp.zeros(zeros, weight.dtype)  # port: was `weight.new_zeros(...)`
