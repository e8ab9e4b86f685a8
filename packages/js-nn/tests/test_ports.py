"""Four real pieces of PyTorch model code, ported to js, against PyTorch (issue 12).

Each port (``ports/``) loads PyTorch's weights with ``js.nn.load_torch_state_dict`` and must
match PyTorch's outputs and **every** parameter gradient, in training and evaluation mode,
float32; then 20 Adam steps in lockstep (same data, same initial weights) must give PyTorch's
losses to 1e-4 relative. Gradients are those of ``sum(output * cotangent)`` for a fixed random
cotangent (a vector-Jacobian product: every output element weighs in). Tolerances: outputs
within 1e-5 of max(1, largest |PyTorch output|), each gradient within 1e-4 of the model's
largest |PyTorch gradient|, each step's loss within 1e-4 relative (docs/porting.md has the
measured figures; ``JS_NN_REPORT=1 ... -s`` prints them). Dropout is 0 where values are
compared; a separate test per port checks shapes with dropout on.

The lockstep tests need js-optim (not a dependency of js-nn): they are skipped without it.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.nn as nn

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
F = torch.nn.functional

# importlib mode does not put this folder on the path; the ports live beside us.
sys.path.insert(0, str(Path(__file__).parent))
from ports import compare  # noqa: E402
from ports.compare import MAX_DIFF, record  # noqa: E402

OUTPUT_TOL = 1e-5  # relative to max |torch output|
GRAD_TOL = 1e-4  # relative to the model's largest |torch gradient|
LOSS_TOL = 1e-4  # relative, per step, over 20 Adam steps
STEPS = 20

# The default run compares each port with PyTorch in training mode (outputs and gradients);
# evaluation mode (running statistics, no dropout) is the full tier's (test:full).
MODES = ["train", pytest.param("eval", marks=pytest.mark.slow)]


def _check_outputs_and_grads(
    port, js_model, t_model, js_fwd, t_fwd, mode, js_args, t_args, out_tol=OUTPUT_TOL
):
    js_model.train(mode == "train")
    t_model.train(mode == "train")
    with torch.no_grad():
        probe = t_fwd(t_model, *t_args)
    probe = probe if isinstance(probe, tuple) else (probe,)
    cots = compare.cotangents_for([tuple(p.shape) for p in probe])
    outs, grads = compare.js_output_and_grads(js_model, js_fwd, cots, *js_args)
    t_outs, t_grads = compare.torch_output_and_grads(torch, t_model, t_fwd, cots, *t_args)
    scale = max(1.0, max(float(np.max(np.abs(o))) for o in t_outs))
    out_diff = record(port, f"output {mode}", compare.max_abs(zip(outs, t_outs, strict=True)))
    g_abs, g_rel = compare.grad_differences(grads, t_grads)
    record(port, f"grad {mode}", g_abs)
    record(port, f"grad {mode} (relative)", g_rel)
    assert out_diff <= out_tol * scale
    assert g_abs <= GRAD_TOL * max(float(np.max(np.abs(g))) for g in t_grads.values())


def _adam_losses(js_model, js_loss, batches, **adam):
    optim = pytest.importorskip("js.optim")
    opt = optim.Adam(js_model.parameters(), **adam)

    @js.jit
    def step(model, opt, *batch):
        loss, grads = js.value_and_grad(js_loss)(model, *batch)
        opt.step(grads)
        return loss

    return [float(step(js_model, opt, *batch)) for batch in batches]


def _torch_adam_losses(t_model, t_loss, batches, **adam):
    opt = torch.optim.Adam(t_model.parameters(), **adam)
    losses = []
    for batch in batches:
        opt.zero_grad()
        loss = t_loss(t_model, *batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _check_lockstep(port, js_losses, t_losses, trains=True):
    diff = record(
        port, "Adam 20-step loss (relative)", compare.relative_loss_difference(js_losses, t_losses)
    )
    assert diff <= LOSS_TOL, (js_losses, t_losses)
    assert not trains or t_losses[-1] < t_losses[0]  # the steps did train (a GAN need not)


def _randomise_batchnorm(t_model):
    """Non-trivial BatchNorm affine terms and running statistics (eval mode then differs)."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in t_model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                for tensor in (module.weight, module.bias, module.running_mean):
                    tensor.copy_(
                        torch.rand(tensor.shape, generator=gen) - 0.5 + (tensor is module.weight)
                    )
                module.running_var.copy_(torch.rand(module.running_var.shape, generator=gen) + 0.5)


def _logits_loss_js(model, x, y):
    logp = jax.nn.log_softmax(model(x), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))


def _logits_loss_torch(model, x, y):
    return F.cross_entropy(model(x), y)


# -- torchvision's ResNet-18 -------------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet_pair():
    from ports.resnet import resnet18
    from ports.torchvision_source import load_resnet, resnet_path, torch_resnet18

    path = resnet_path()
    if path is None:
        pytest.skip("torchvision is not installed: pip install --no-deps torchvision==0.28.0")
    torch.manual_seed(0)
    t_model = torch_resnet18(load_resnet(path), num_classes=10)
    _randomise_batchnorm(t_model)
    state = {k: v.clone() for k, v in t_model.state_dict().items()}
    model = resnet18(rngs=js.Rngs(params=0), num_classes=10, zero_init_residual=True)
    return model, t_model, state


def _reset(pair):
    model, t_model, state = pair
    t_model.load_state_dict(state)
    assert nn.load_torch_state_dict(model, state) == ([], [])
    return model, t_model


# ~9 s on an idle 2-core machine (compiling the training step): full tier only. ResNet-18's
# training step against torch's stays in the default run through js-train's
# test_ports_lockstep.py::test_resnet18_adam_lockstep (these helpers, Adam in lockstep).
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_resnet18_matches_pytorch(resnet_pair, mode):
    model, t_model = _reset(resnet_pair)
    # Batch 2 in evaluation; 8 in training, where layer4's BatchNorm normalises N * 1 * 1
    # values per channel: with N = 2 that is ill-conditioned (torch float32 itself is 8e-3
    # from torch float64 on these outputs; js 6e-3). js float32 against torch float64 also
    # depends on the CPU XLA:CPU's convolution kernels run on: N = 4 gave 1e-5 on one
    # machine and 3.7e-5 on an AMD EPYC, N = 8 gives 8e-6 there; the tolerance is 3e-5.
    x = jax.random.normal(jax.random.key(0), (2 if mode == "eval" else 8, 3, 32, 32))
    t_x = torch.from_numpy(np.array(x))
    if mode == "train":
        # In training, torch float32's own gradients of this model are up to 3.5% (of the
        # largest) away from torch float64's from layer2.0.bn1 down (measured: conv1.weight
        # off by 5.7 of 163), js's 6e-5: compare with float64 PyTorch, the same model.
        t_model, t_x = copy.deepcopy(t_model).double(), t_x.double()
    _check_outputs_and_grads(
        "ResNet-18",
        model,
        t_model,
        lambda m, v: m(v),
        lambda m, v: m(v),
        mode,
        (x,),
        (t_x,),
        out_tol=3e-5 if mode == "train" else OUTPUT_TOL,
    )


def _image_batches(n, shape, classes, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal(shape).astype(np.float32), rng.integers(0, classes, shape[0]))
        for _ in range(n)
    ]


@pytest.mark.slow  # ~30 s here: ResNet-18 forward and backward 20 times in each library
def test_resnet18_adam_lockstep(resnet_pair):
    # Evaluation mode (fixed BatchNorm statistics), one batch 20 times, lr=1e-5: the loss falls
    # from 2.9 to 0.26 without reaching float32 noise. In training mode with batch 4 the run
    # is ill-conditioned: after 20 steps js is 3.9e-3 (relative) from float64 PyTorch and
    # float32 PyTorch 4.3e-3 from js, so float32 can not be held to 1e-4 there. With lr=1e-3
    # Adam's first steps move every weight by ~lr whatever its gradient's size, and weights
    # whose gradients are at float32 noise level then set the direction (measured 4e-1).
    model, t_model = _reset(resnet_pair)
    model.eval()
    t_model.eval()
    batches = _image_batches(1, (2, 3, 32, 32), 10) * STEPS
    losses = _adam_losses(
        model, _logits_loss_js, [(jnp.asarray(x), jnp.asarray(y)) for x, y in batches], lr=1e-5
    )
    t_losses = _torch_adam_losses(
        t_model,
        _logits_loss_torch,
        [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches],
        lr=1e-5,
    )
    _check_lockstep("ResNet-18", losses, t_losses)


def test_resnet18_port_keeps_torchvision_structure(resnet_pair):
    # Same modules in the same order, with the same state-dict keys and shapes.
    model, t_model, _ = resnet_pair
    names = [(n, type(m).__name__) for n, m in model.named_modules()]
    t_names = [(n, type(m).__name__) for n, m in t_model.named_modules()]
    assert names == t_names
    exported = nn.torch_state_dict(model)
    assert {k: v.shape for k, v in exported.items()} == {
        k: tuple(v.shape) for k, v in t_model.state_dict().items()
    }


# -- the DCGAN tutorial ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dcgan_pair():
    from ports import dcgan, torch_dcgan

    torch.manual_seed(0)
    t_g, t_d = torch_dcgan.Generator(0), torch_dcgan.Discriminator(0)
    t_g.apply(torch_dcgan.weights_init)
    t_d.apply(torch_dcgan.weights_init)
    g, d = (
        dcgan.Generator(0, rngs=js.Rngs(params=1)),
        dcgan.Discriminator(0, rngs=js.Rngs(params=2)),
    )
    assert g.apply(dcgan.weights_init) is g
    d.apply(dcgan.weights_init)
    # weights_init drew N(0, 0.02) into every convolution and N(1, 0.02) into BatchNorm.
    conv = np.concatenate(
        [np.ravel(m.weight.value) for m in d.modules() if isinstance(m, nn.Conv2d)]
    )
    assert abs(conv.std() - 0.02) < 2e-3 and abs(conv.mean()) < 2e-3
    state = {
        k: v.clone()
        for k, v in {
            **{f"g.{k}": v for k, v in t_g.state_dict().items()},
            **{f"d.{k}": v for k, v in t_d.state_dict().items()},
        }.items()
    }
    return g, d, t_g, t_d, state, dcgan.nz


def _dcgan_reset(pair):
    g, d, t_g, t_d, state, _ = pair
    for model, t_model, prefix in ((g, t_g, "g."), (d, t_d, "d.")):
        part = {k[2:]: v for k, v in state.items() if k.startswith(prefix)}
        t_model.load_state_dict(part)
        assert nn.load_torch_state_dict(model, part) == ([], [])


class _GAN(nn.Module):  # both halves in one module, so one call differentiates all of them
    def __init__(self, g, d):
        super().__init__()
        self.g, self.d = g, d

    def forward(self, z):
        fake = self.g(z)
        return fake, self.d(fake)


# Both networks' comparison: 2.9 s alone, but 7.6 s (5.6 s of CPU) beside the other lanes of a
# CI run, over the default run's limit: the full tier's, with evaluation mode.
@pytest.mark.parametrize(
    "mode", [pytest.param(m, marks=pytest.mark.slow) for m in ("train", "eval")]
)
def test_dcgan_matches_pytorch(dcgan_pair, mode):
    g, d, t_g, t_d, _, nz = dcgan_pair
    _dcgan_reset(dcgan_pair)
    z = jax.random.normal(jax.random.key(0), (4, nz, 1, 1))
    t_z = torch.from_numpy(np.array(z))
    _check_outputs_and_grads(
        "DCGAN",
        _GAN(g, d),
        _GAN_torch(t_g, t_d),
        lambda m, v: m(v),
        lambda m, v: m(v),
        mode,
        (z,),
        (t_z,),
    )


class _GAN_torch(torch.nn.Module):
    def __init__(self, g, d):
        super().__init__()
        self.g, self.d = g, d

    def forward(self, z):
        fake = self.g(z)
        return fake, self.d(fake)


def _bce(p, target):  # torch's BCELoss: log clamped at -100
    log_p, log_q = jnp.maximum(jnp.log(p), -100.0), jnp.maximum(jnp.log1p(-p), -100.0)
    return -jnp.mean(target * log_p + (1 - target) * log_q)


def test_dcgan_adam_lockstep(dcgan_pair):
    # The tutorial's loop: a discriminator step on real and (detached) fake images, then a
    # generator step through the updated discriminator; Adam(betas=(0.5, 0.999)) with lr 2e-5.
    # At the tutorial's lr=2e-4 the game amplifies float32 rounding: js and torch agree to
    # 3e-7 for 10-15 steps, then part (measured 1.7e-2 relative by step 20, batch 4 or 8).
    optim = pytest.importorskip("js.optim")
    g, d, t_g, t_d, _, nz = dcgan_pair
    _dcgan_reset(dcgan_pair)
    for m in (g, d, t_g, t_d):
        m.train()
    rng = np.random.default_rng(0)
    real = rng.uniform(-1, 1, (STEPS, 4, 3, 64, 64)).astype(np.float32)
    noise = rng.standard_normal((STEPS, 4, nz, 1, 1)).astype(np.float32)
    data = list(zip(real, noise, strict=True))
    adam = dict(lr=2e-5, betas=(0.5, 0.999))
    opt_d, opt_g = optim.Adam(d.parameters(), **adam), optim.Adam(g.parameters(), **adam)

    def d_loss(d, real, fake):
        return _bce(d(real).reshape(-1), 1.0) + _bce(d(fake).reshape(-1), 0.0)

    def g_loss(g, d, z):
        return _bce(d(g(z)).reshape(-1), 1.0)

    @js.jit
    def step(g, d, opt_g, opt_d, real, z):
        fake = js.stop_gradient(g(z))
        err_d, grads = js.value_and_grad(d_loss)(d, real, fake)
        opt_d.step(grads)
        err_g, grads = js.value_and_grad(g_loss)(g, d, z)
        opt_g.step(grads)
        return err_d, err_g

    losses = [
        tuple(float(v) for v in step(g, d, opt_g, opt_d, jnp.asarray(r), jnp.asarray(z)))
        for r, z in data
    ]
    t_losses = _torch_dcgan_losses(t_g, t_d, data, adam)
    js_losses = [loss for pair in losses for loss in pair]
    _check_lockstep("DCGAN", js_losses, t_losses, trains=False)


def _torch_dcgan_losses(t_g, t_d, data, adam):
    opt_d, opt_g = (
        torch.optim.Adam(t_d.parameters(), **adam),
        torch.optim.Adam(t_g.parameters(), **adam),
    )
    bce, losses = torch.nn.BCELoss(), []
    for real, z in data:
        real, z = torch.from_numpy(real), torch.from_numpy(z)
        t_d.zero_grad()
        fake = t_g(z)
        out_real, out_fake = t_d(real).view(-1), t_d(fake.detach()).view(-1)
        err_d = bce(out_real, torch.ones_like(out_real)) + bce(out_fake, torch.zeros_like(out_fake))
        err_d.backward()
        opt_d.step()
        t_g.zero_grad()
        out = t_d(fake).view(-1)
        err_g = bce(out, torch.ones_like(out))
        err_g.backward()
        opt_g.step()
        losses += [err_d.item(), err_g.item()]
    return losses


# -- the word-language-model RNNModel: 2-layer LSTM and GRU ------------------------------------

NTOKEN, T, B = 50, 7, 3


def _lm_pair(rnn_type, dropout=0.0):
    from ports import torch_word_language_model as torch_lm
    from ports import word_language_model as lm

    torch.manual_seed(0)
    t_model = torch_lm.RNNModel(rnn_type, NTOKEN, 16, 24, 2, dropout)
    model = lm.RNNModel(rnn_type, NTOKEN, 16, 24, 2, dropout, rngs=js.Rngs(params=0))
    assert nn.load_torch_state_dict(model, t_model.state_dict()) == ([], [])
    return model, t_model


def _flat(out):  # (log_probs, h) or (log_probs, (h, c)) -> a flat tuple of arrays
    logp, hidden = out
    return (logp, *hidden) if isinstance(hidden, tuple) else (logp, hidden)


def _tokens(seed, shape=(T, B)):
    return np.random.default_rng(seed).integers(0, NTOKEN, shape)


@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU"])
@pytest.mark.parametrize("mode", MODES)
def test_language_model_matches_pytorch(rnn_type, mode):
    # dropout=0 (the example's default is 0.2): values compared in both modes; the dropout
    # masks themselves differ between generators (test_language_model_dropout_shapes).
    model, t_model = _lm_pair(rnn_type)
    tokens = _tokens(0)
    hidden, t_hidden = model.init_hidden(B), t_model.init_hidden(B)
    _check_outputs_and_grads(
        f"LM {rnn_type}",
        model,
        t_model,
        lambda m, x, h: _flat(m(x, h, rngs=js.Rngs(dropout=0))),
        lambda m, x, h: _flat(m(x, h)),
        mode,
        (jnp.asarray(tokens), hidden),
        (torch.from_numpy(tokens), t_hidden),
    )


def test_language_model_dropout_shapes():
    # dropout=0.5 in training: shapes equal PyTorch's, and the masks do act (outputs differ
    # from evaluation mode); evaluation mode still matches PyTorch's values.
    model, t_model = _lm_pair("LSTM", dropout=0.5)
    tokens = _tokens(1)
    out = _flat(model.train()(jnp.asarray(tokens), model.init_hidden(B), rngs=js.Rngs(dropout=0)))
    t_out = _flat(t_model.train()(torch.from_numpy(tokens), t_model.init_hidden(B)))
    assert [o.shape for o in out] == [tuple(o.shape) for o in t_out]
    evaluated = _flat(model.eval()(jnp.asarray(tokens), model.init_hidden(B)))
    assert not np.allclose(out[0], evaluated[0])
    with torch.no_grad():
        t_eval = _flat(t_model.eval()(torch.from_numpy(tokens), t_model.init_hidden(B)))
    assert compare.max_abs(zip(evaluated, t_eval, strict=True)) < 1e-5


def _nll_js(model, tokens, targets):
    logp, _ = model(tokens, model.init_hidden(B), rngs=js.Rngs(dropout=0))
    return -jnp.mean(jnp.take_along_axis(logp, targets.reshape(-1, 1), axis=1))


def _nll_torch(model, tokens, targets):
    logp, _ = model(tokens, model.init_hidden(B))
    return F.nll_loss(logp, targets.reshape(-1))


@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU"])
def test_language_model_adam_lockstep(rnn_type):
    model, t_model = _lm_pair(rnn_type)
    model.train()
    t_model.train()
    data = [(_tokens(s), _tokens(s + 100)) for s in range(STEPS)]
    losses = _adam_losses(model, _nll_js, [(jnp.asarray(x), jnp.asarray(y)) for x, y in data])
    t_losses = _torch_adam_losses(
        t_model, _nll_torch, [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data]
    )
    _check_lockstep(f"LM {rnn_type}", losses, t_losses, trains=False)


# -- a TransformerEncoder classifier -----------------------------------------------------------

LENGTHS = np.array([9, 5, 7, 2])  # valid tokens per sequence; the rest is padding (id 0)


def _classifier_pair(dropout=0.0):
    from ports import torch_transformer_classifier as torch_tc
    from ports import transformer_classifier as tc

    torch.manual_seed(0)
    args = (40, 16, 4, 32, 2, 3, dropout)  # ntoken, d_model, nhead, d_hid, nlayers, nclass
    t_model = torch_tc.TransformerClassifier(*args)
    model = tc.TransformerClassifier(*args, rngs=js.Rngs(params=0))
    assert nn.load_torch_state_dict(model, t_model.state_dict()) == ([], [])
    return model, t_model


def _padded_tokens(seed):
    pad = np.arange(LENGTHS.max())[None, :] >= LENGTHS[:, None]  # [B, T], True = padding
    tokens = np.random.default_rng(seed).integers(1, 40, pad.shape)
    return np.where(pad, 0, tokens), pad


# torch warns that its nested tensors (the fast path for padded batches) are a prototype.
NESTED = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")


@NESTED
@pytest.mark.parametrize("mode", MODES)
def test_transformer_classifier_matches_pytorch(mode):
    # dropout=0 for values (masks differ between generators). In evaluation mode without
    # gradients torch takes its fused fast path; with gradients (here) its ordinary one.
    model, t_model = _classifier_pair()
    tokens, pad = _padded_tokens(0)
    _check_outputs_and_grads(
        "Transformer classifier",
        model,
        t_model,
        lambda m, x, p: m(x, p, rngs=js.Rngs(dropout=0)),
        lambda m, x, p: m(x, p),
        mode,
        (jnp.asarray(tokens), jnp.asarray(pad)),
        (torch.from_numpy(tokens), torch.from_numpy(pad)),
    )


@NESTED
@pytest.mark.slow  # ~6 s idle; the classifier's outputs and gradients: the test above
def test_transformer_classifier_fast_path_and_dropout_shapes():
    model, t_model = _classifier_pair(dropout=0.3)
    tokens, pad = _padded_tokens(1)
    with torch.no_grad():  # PyTorch's fused inference path (nested tensors for the padding)
        t_out = t_model.eval()(torch.from_numpy(tokens), torch.from_numpy(pad)).numpy()
    out = model.eval()(jnp.asarray(tokens), jnp.asarray(pad))
    assert (
        record("Transformer classifier", "output eval fast path", compare.max_abs([(out, t_out)]))
        < 1e-5
    )
    train = model.train()(jnp.asarray(tokens), jnp.asarray(pad), rngs=js.Rngs(dropout=0))
    assert train.shape == t_out.shape and not np.allclose(train, out)


def test_transformer_classifier_adam_lockstep():
    model, t_model = _classifier_pair()
    model.train()
    t_model.train()
    labels = np.random.default_rng(7).integers(0, 3, (STEPS, len(LENGTHS)))
    data = [(*_padded_tokens(s), labels[s]) for s in range(STEPS)]

    def js_loss(m, x, p, y):
        return _logits_loss_js(lambda v: m(v, p, rngs=js.Rngs(dropout=0)), x, y)

    def torch_loss(m, x, p, y):
        return F.cross_entropy(m(x, p), y)

    losses = _adam_losses(model, js_loss, [tuple(map(jnp.asarray, d)) for d in data])
    t_losses = _torch_adam_losses(
        t_model, torch_loss, [tuple(map(torch.from_numpy, d)) for d in data]
    )
    _check_lockstep("Transformer classifier", losses, t_losses, trains=False)


@pytest.mark.skipif(not os.environ.get("JS_NN_REPORT"), reason="set JS_NN_REPORT=1 to print")
def test_report_port_differences(capsys):
    # JS_NN_REPORT=1 pytest ... test_ports.py -s prints the figures quoted in docs/porting.md.
    with capsys.disabled():
        for port, table in MAX_DIFF.items():
            for what, value in table.items():
                print(f"{port:<22} {what:<32} {value:.2e}")


# The 1-D pools run the 2-D ones' code (js.nn._pool_ops.max_pool and avg_pool for any rank):
# the full tier's.
@pytest.mark.parametrize(
    "layer, shape",
    [
        pytest.param(nn.MaxPool2d(3, 2, 1), (2, 3, 8, 8), id="MaxPool2d"),
        pytest.param(nn.AvgPool2d(3, 2, 1), (2, 3, 8, 8), id="AvgPool2d"),
        pytest.param(nn.MaxPool1d(3, 2, 1), (2, 3, 8), id="MaxPool1d", marks=pytest.mark.slow),
        pytest.param(nn.AvgPool1d(3, 2, 1), (2, 3, 8), id="AvgPool1d", marks=pytest.mark.slow),
    ],
)
def test_padded_pools_differentiate_under_jit(layer, shape):
    # The ResNet stem found it: reduce_window with a traced init value has no gradient.
    x = jax.random.normal(jax.random.key(0), shape)
    eager = jax.grad(lambda v: jnp.sum(layer(v) ** 2))(x)
    compiled = jax.jit(jax.grad(lambda v: jnp.sum(layer(v) ** 2)))(x)
    np.testing.assert_allclose(compiled, eager, atol=1e-6)
