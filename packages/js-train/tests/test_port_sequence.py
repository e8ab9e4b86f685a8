"""Ports of PyTorch sequence models, written as their PyTorch source with js's imports.

- ``RNNModel``: pytorch/examples' ``word_language_model/model.py`` (LSTM and GRU variants);
  the port adds ``rngs=``, ``batch_first=False`` (js's default is batch first) and passes
  ``rngs`` to the dropout calls; ``.view(-1, n)`` is ``.reshape(-1, n)``.
- ``Classifier``: a ``TransformerEncoder`` sequence classifier in the style of PyTorch's
  transformer tutorial; the port adds ``rngs=`` and writes the padding mask in js's polarity
  (``mask=padding_mask(valid)``, PyTorch: ``src_key_padding_mask=~valid``).

Each port loads PyTorch's weights (``load_torch_state_dict``), matches PyTorch's outputs and
every parameter gradient in train and eval mode (dropout 0: the two libraries draw different
masks), and 20 lockstep Adam steps match PyTorch's losses.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.nn as nn
import js.nn.functional as F
from js._variables import flat_arrays
from js.losses import cross_entropy
from js.nn.attention import padding_mask
from js.optim import Adam

torch = pytest.importorskip("torch")
tnn, TF = torch.nn, torch.nn.functional
pytestmark = pytest.mark.torch

V, E, H, T, B = 11, 8, 12, 7, 3  # vocabulary, embedding, hidden, steps, batch
GRAD_TOL = 1e-6  # float32 on CPU; measured: losses equal, gradients <= 9e-8 (LSTM 6e-9)
LOSS_RTOL = 1e-4  # measured over 20 Adam steps: LM 1.2e-6, transformer 1.4e-5 relative
STEPS = 20


# -- the PyTorch sources ---------------------------------------------------------------------


class TorchRNNModel(tnn.Module):
    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.ntoken = ntoken
        self.drop = tnn.Dropout(dropout)
        self.encoder = tnn.Embedding(ntoken, ninp)
        self.rnn = getattr(tnn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = tnn.Linear(nhid, ntoken)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return TF.log_softmax(decoded, dim=1), hidden


class TorchClassifier(tnn.Module):
    def __init__(self, ntoken, d_model, nhead, d_hid, nlayers, nclass, dropout=0.1):
        super().__init__()
        self.embedding = tnn.Embedding(ntoken, d_model)
        layer = tnn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, batch_first=True)
        self.encoder = tnn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.head = tnn.Linear(d_model, nclass)

    def forward(self, src, valid):
        x = self.encoder(self.embedding(src), src_key_padding_mask=~valid)
        return self.head(x[:, 0])


# -- the js ports (the same lines; differences listed in the module docstring) ----------------


class RNNModel(nn.Module):
    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, *, rngs):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp, rngs=rngs)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout, batch_first=False,
                                         rngs=rngs)
        self.decoder = nn.Linear(nhid, ntoken, rngs=rngs)

    def forward(self, input, hidden, rngs=None):
        emb = self.drop(self.encoder(input), rngs=rngs)
        output, hidden = self.rnn(emb, hidden, rngs=rngs)
        output = self.drop(output, rngs=rngs)
        decoded = self.decoder(output)
        decoded = decoded.reshape(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden


class Classifier(nn.Module):
    def __init__(self, ntoken, d_model, nhead, d_hid, nlayers, nclass, dropout=0.1, *, rngs):
        super().__init__()
        self.embedding = nn.Embedding(ntoken, d_model, rngs=rngs)
        layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, batch_first=True,
                                           rngs=rngs)
        self.encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, nclass, rngs=rngs)

    def forward(self, src, valid, rngs=None):
        x = self.encoder(self.embedding(src), mask=padding_mask(valid), rngs=rngs)
        return self.head(x[:, 0])


# -- harness ---------------------------------------------------------------------------------


def _tokens(seed, shape):  # two batches, alternating: 20 steps are enough to fit them
    return np.random.default_rng(seed).integers(0, V, size=shape)


def _lm_case(rnn_type):
    """(torch model, js model, loss functions, batches) for the language model."""
    torch.manual_seed(0)
    ref = TorchRNNModel(rnn_type, V, E, H, 2, dropout=0.0)
    model = RNNModel(rnn_type, V, E, H, 2, dropout=0.0, rngs=js.Rngs(params=0))
    lstm = rnn_type == "LSTM"

    def hidden(zeros):
        h = zeros((2, B, H))
        return (h, zeros((2, B, H))) if lstm else h

    def torch_loss(m, batch):
        out, _ = m(torch.tensor(batch[:-1]), hidden(torch.zeros))
        return TF.nll_loss(out, torch.tensor(batch[1:]).reshape(-1))

    def js_loss(m, batch):
        out, _ = m(jnp.asarray(batch[:-1]), hidden(jnp.zeros))
        return cross_entropy(out, jnp.asarray(batch[1:]).reshape(-1))  # log_softmax is idempotent

    batches = [_tokens(step % 2, (T + 1, B)) for step in range(STEPS)]  # [T + 1, B], time first
    return ref, model, torch_loss, js_loss, batches


def _classifier_case(_):
    torch.manual_seed(0)
    ref = TorchClassifier(V, 16, 2, 24, 2, 3, dropout=0.0)
    with torch.no_grad():  # PyTorch's encoder copies start equal: make layer 1 differ
        for p in ref.encoder.layers[1].parameters():
            p.add_(0.1 * torch.randn_like(p))
    model = Classifier(V, 16, 2, 24, 2, 3, dropout=0.0, rngs=js.Rngs(params=0))
    valid = np.arange(T)[None] < np.array([[T], [4], [2]])  # [B, T], True = a real token

    def torch_loss(m, batch):
        return TF.cross_entropy(m(torch.tensor(batch[0]), torch.tensor(valid)),
                                torch.tensor(batch[1]))

    def js_loss(m, batch):
        return cross_entropy(m(jnp.asarray(batch[0]), jnp.asarray(valid)), jnp.asarray(batch[1]))

    rng = np.random.default_rng(1)
    pairs = [(_tokens(s, (B, T)), rng.integers(0, 3, size=B)) for s in range(2)]
    batches = [pairs[step % 2] for step in range(STEPS)]
    return ref, model, torch_loss, js_loss, batches


CASES = {"LSTM-LM": (_lm_case, "LSTM"), "GRU-LM": (_lm_case, "GRU"),
         "TransformerClassifier": (_classifier_case, None)}  # fmt: skip


def _load(ref, model):
    assert js.nn.load_torch_state_dict(model, ref.state_dict()) == ([], [])


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_port_matches_pytorch_loss_and_every_gradient(name, mode):
    build, arg = CASES[name]
    ref, model, torch_loss, js_loss, batches = build(arg)
    _load(ref, model)
    getattr(ref, mode)(), getattr(model, mode)()
    want = torch_loss(ref, batches[0])
    want.backward()
    loss, grads = js.value_and_grad(js_loss)(model, batches[0])
    np.testing.assert_allclose(float(loss), want.item(), rtol=1e-6, atol=1e-6)
    got = {k: np.asarray(v) for k, v in flat_arrays(grads).items()}  # PyTorch's key names
    expected = {k: p.grad.numpy() for k, p in ref.named_parameters()}
    assert sorted(got) == sorted(expected)
    worst = {k: float(np.abs(got[k] - expected[k]).max()) for k in expected}
    assert max(worst.values()) <= GRAD_TOL, worst


@pytest.mark.parametrize("name", sorted(CASES))
def test_twenty_lockstep_adam_steps_match_pytorch_losses(name):
    build, arg = CASES[name]
    ref, model, torch_loss, js_loss, batches = build(arg)
    _load(ref, model)
    torch_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    opt = Adam(model.parameters(), lr=1e-2)

    @js.jit
    def step(model, opt, batch):
        loss, grads = js.value_and_grad(js_loss)(model, batch)
        opt.step(grads)
        return loss

    theirs, ours = [], []
    for batch in batches:
        torch_opt.zero_grad()
        loss = torch_loss(ref, batch)
        loss.backward()
        torch_opt.step()
        theirs.append(loss.item())
        ours.append(float(step(model, opt, batch)))
    np.testing.assert_allclose(ours, theirs, rtol=LOSS_RTOL)
    assert theirs[-2] < theirs[0]  # it trained: batches alternate, 0 and 18 are the same
