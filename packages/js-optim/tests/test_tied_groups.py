"""Tied Parameters in every parameter-group form (issue 37): one Parameter under two paths.

``js.value_and_grad`` files a tied Parameter's gradient (the sum of its uses) once, under the
path NNX keeps, the first in sorted order (nanoGPT's ``lm_head.weight``), while
``named_parameters()`` names it as torch does, by the first path in registration order
(``transformer.wte.weight``). Each group form must still find that gradient: a selection of
the whole model knows both paths, the others find it as the one gradient of its shape their
paths leave (js.optim._paths). Three ties, each in every form: nanoGPT's
(``self.transformer.wte.weight = self.lm_head.weight``), GPT-2's in the other direction
(``self.lm_head.weight = self.transformer.wte.weight``; the real GPT-2 is in js-models'
tests), and one across two submodules (``decoder.proj.weight`` is ``encoder.proj.weight``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js._checks import flatten_state
from js.optim import AdamW, param_groups

try:  # imported here, at collection (conftest.py: torch's first optimizer is slow to import)
    import torch
except ImportError:
    torch = None

V, T, C = 11, 5, 4  # vocabulary, block size, width: every matrix of its own shape
LR, EPS = 0.01, 1e-8


def normal(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


class Embedding(js.Module):
    def __init__(self, n, dim, seed):
        self.weight = js.Parameter(normal((n, dim), seed))

    def forward(self, idx):
        return self.weight.value[idx]


class Linear(js.Module):
    """torch's layout: weight [out, in]."""

    def __init__(self, n_in, n_out, seed, bias=True):
        self.weight = js.Parameter(normal((n_out, n_in), seed))
        self.bias = js.Parameter(normal((n_out,), seed + 1)) if bias else None

    def forward(self, x):
        y = x @ self.weight.value.T
        return y if self.bias is None else y + self.bias.value


class LayerNorm(js.Module):
    def __init__(self, dim):
        self.weight = js.Parameter(jnp.ones(dim))
        self.bias = js.Parameter(jnp.zeros(dim))

    def forward(self, x):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * self.weight.value + self.bias.value


class Block(js.Module):
    def __init__(self, seed):
        self.ln = LayerNorm(C)
        self.fc = Linear(C, 2 * C, seed)
        self.proj = Linear(2 * C, C, seed + 2)

    def forward(self, x):
        return x + self.proj(jnp.tanh(self.fc(self.ln(x))))


class TinyGPT(js.Module):
    """nanoGPT's layout. ``tie="nanogpt"``: ``self.transformer.wte.weight =
    self.lm_head.weight`` (nanoGPT's line); ``"gpt2"``: the other direction (js-models')."""

    def __init__(self, tie="nanogpt"):
        self.tie = tie
        self.transformer = js.ModuleDict(
            dict(wte=Embedding(V, C, 0), wpe=Embedding(T, C, 1), h=[Block(2)], ln_f=LayerNorm(C))
        )
        self.lm_head = Linear(C, V, 5, bias=False)
        if tie == "nanogpt":
            self.transformer.wte.weight = self.lm_head.weight
        else:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx):  # [B, T] -> [B, T, V]
        x = self.transformer.wte(idx) + self.transformer.wpe(jnp.arange(idx.shape[1]))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))

    def submodule_groups(self):
        """nanoGPT's tie through the transformer's selection ('wte.weight', no gradient's path
        under 'transformer.'), GPT-2's through the head's ('weight', the gradient's path)."""
        if self.tie == "nanogpt":
            return [{"params": self.transformer.parameters(), "weight_decay": 0.1}]
        blocks, t = self.transformer.h, self.transformer
        return [
            {"params": self.lm_head.parameters(), "lr": 0.02},
            {"params": blocks.parameters(), "weight_decay": 0.1},
            {"params": t.wpe.parameters()},
            {"params": t.ln_f.parameters(), "weight_decay": 0.0},
        ]


class Coder(js.Module):
    def __init__(self, seed, head):
        self.proj = Linear(3, C, seed)  # weight [4, 3]
        self.out = Linear(C, 5, seed + 2) if head else LayerNorm(C)


class AutoEncoder(js.Module):
    """A tie across two submodules: ``decoder.proj.weight`` is ``encoder.proj.weight``
    (named_parameters: 'encoder.proj.weight'; the gradients: 'decoder.proj.weight')."""

    def __init__(self):
        self.encoder = Coder(0, head=False)
        self.decoder = Coder(4, head=True)
        self.decoder.proj.weight = self.encoder.proj.weight

    def forward(self, idx):
        x = jax.nn.one_hot(idx % 3, 3)  # [B, T, 3]
        h = self.encoder.out(jnp.tanh(self.encoder.proj(x)))
        return self.decoder.out(jnp.tanh(self.decoder.proj(x) + h))

    def submodule_groups(self):
        return [
            {"params": self.encoder.parameters(), "lr": 0.02},  # the tie as 'proj.weight' here
            {"params": self.decoder.out.parameters()},
            {"params": [self.decoder.proj.bias], "weight_decay": 0.1},
        ]


TIES = {
    "nanogpt": lambda: TinyGPT("nanogpt"),
    "gpt2": lambda: TinyGPT("gpt2"),
    "across": AutoEncoder,
}


def loss_fn(model, idx):
    return jnp.mean(jax.nn.log_softmax(model(idx))[..., 0])  # every logit, through the softmax


IDX = jnp.asarray(np.random.default_rng(0).integers(0, V, (2, T)))


@pytest.fixture(scope="module")
def grads_of():
    """Each model's gradients (a fresh model of a tie has the same values)."""
    cache = {}
    grad = js.jit(js.grad(loss_fn))  # one compilation, where eager autodiff runs op by op

    def get(tie):
        if tie not in cache:
            cache[tie] = grad(TIES[tie](), IDX)
        return cache[tie]

    return get


def pairs(model):
    """nanoGPT's decay split, as (path, Parameter) pairs of named_parameters()."""
    named = list(model.named_parameters())
    return [
        {"params": [(n, p) for n, p in named if p.ndim >= 2], "weight_decay": 0.1},
        {"params": [(n, p) for n, p in named if p.ndim < 2], "weight_decay": 0.0},
    ]


def matrices_as_list(model):
    """The matrices as a list of Parameters (each of its own shape), the rest as pairs."""
    groups = pairs(model)
    return [{**groups[0], "params": [p for _, p in groups[0]["params"]]}, groups[1]]


FORMS = {
    "parameters": lambda model: model.parameters(),
    "pairs": pairs,
    "submodules": lambda model: model.submodule_groups(),
    "list": matrices_as_list,
    "param_groups": lambda model: param_groups(model, weight_decay=0.1),
}


def expected_step(model, opt, grads):
    """One AdamW step, by hand: at step 1 the moments give ``g / (|g| + eps)``."""
    selection = model.parameters()  # knows each gradient's path, a tied one's too
    by_id = {id(p): g for p, g in zip(selection, selection.match(grads), strict=True)}
    want = {}
    for group in opt.param_groups:
        lr, wd = group["lr"], group["weight_decay"]
        for p in group["params"]:
            g = np.asarray(by_id[id(p)])
            want[id(p)] = np.asarray(p.value) * (1 - lr * wd) - lr * g / (np.abs(g) + EPS)
    return want


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("tie", list(TIES))
def test_every_group_form_steps_a_tied_model(tie, form, grads_of):
    model = TIES[tie]()
    grads = grads_of(tie)
    opt = AdamW(FORMS[form](model), lr=LR)
    params = [p for _, p in model.named_parameters()]
    assert sorted(id(p) for g in opt.param_groups for p in g["params"]) == sorted(map(id, params))
    want = expected_step(model, opt, grads)
    opt.step(grads)
    for path, p in model.named_parameters():
        np.testing.assert_allclose(p.value, want[id(p)], rtol=1e-6, atol=1e-7, err_msg=path)
    # the tie holds, and its Parameter has one state entry per field (not one per path)
    tied = model.lm_head.weight if tie != "across" else model.decoder.proj.weight
    assert tied is (model.transformer.wte.weight if tie != "across" else model.encoder.proj.weight)
    mu = [k for k in opt.state_dict() if k.startswith("adam.mu.")]
    assert len(mu) == len(params)


def test_the_issue_pairs_under_jit_and_the_state_dicts_round_trip(grads_of):
    """The issue's optimizer, compiled; then model and optimizer state dicts saved and loaded
    into a fresh tied model and optimizer, which step on exactly as the original."""
    model = TinyGPT()
    opt = AdamW([{"params": list(model.named_parameters()), "weight_decay": 0.1}], lr=LR)

    @js.jit
    def step(model, opt, idx):
        loss, grads = js.value_and_grad(loss_fn)(model, idx)
        opt.step(grads)
        return loss

    step(model, opt, IDX)
    again = TinyGPT()
    again_opt = AdamW([{"params": list(again.named_parameters()), "weight_decay": 0.1}], lr=LR)
    saved = opt.state_dict()
    assert "adam.mu.transformer.wte.weight" in saved and "adam.mu.lm_head.weight" not in saved
    again.load_state_dict(model.state_dict())  # both paths of the tie, one value
    again_opt.load_state_dict(saved)
    assert again.lm_head.weight is again.transformer.wte.weight
    for m, o in ((model, opt), (again, again_opt)):
        step(m, o, IDX)
    for (path, p), (_, q) in zip(model.named_parameters(), again.named_parameters(), strict=True):
        np.testing.assert_array_equal(p.value, q.value, err_msg=path)
    assert int(again_opt.step_count) == 2


class SharedPair(js.Module):
    """A shared module (``dec`` is ``enc``) of two same-shaped Parameters: the gradients name
    them 'dec.a' and 'dec.b', named_parameters() 'enc.a' and 'enc.b'."""

    def __init__(self):
        self.enc = js.Module()
        self.enc.a, self.enc.b = js.Parameter(jnp.ones(2)), js.Parameter(jnp.ones(2))
        self.dec = self.enc

    def forward(self, x):
        return jnp.sum(self.enc.a.value * x + self.dec.b.value * x**2)


def test_two_tied_parameters_of_one_shape_named_otherwise_step_or_by_paths_are_refused():
    model = SharedPair()
    grads = js.grad(lambda m: m(jnp.arange(2.0)))(model)
    assert sorted(flatten_state(grads)) == ["dec.a", "dec.b"]
    opt = AdamW([{"params": list(model.named_parameters())}])
    with pytest.raises(
        ValueError,
        match=r"AdamW.step: .*2 Parameters given without a path \(or tied ones, named otherwise "
        r"than in the gradients\) have the shape \[2\], and so do the gradients \['dec\.a', "
        r"'dec\.b'\]: which is which cannot be told\. Fix: .*js\.optim\.param_groups\(model\)",
    ):
        opt.step(dict(flatten_state(grads)))  # paths alone: which is which cannot be told
    opt.step(grads)  # js.grad's own gradients know their Parameters
    assert int(opt.step_count) == 1
    fixed = AdamW(param_groups(model, weight_decay=0.1))  # knows the gradients' paths
    fixed.step(grads)
    assert int(fixed.step_count) == 1


def test_a_group_none_of_whose_paths_is_a_gradient_goes_by_shapes_or_is_refused(grads_of):
    """The tied Parameter alone in a group of pairs: its path is no gradient's, and the one
    gradient of its shape left is its own. A group of another model's paths is refused."""
    model = TinyGPT()
    named = list(model.named_parameters())
    opt = AdamW(
        [{"params": named[:1], "lr": 0.02}, {"params": named[1:], "weight_decay": 0.0}], lr=LR
    )
    assert opt.param_groups[0].paths == ("transformer.wte.weight",)
    want = expected_step(model, opt, grads_of("nanogpt"))
    opt.step(grads_of("nanogpt"))
    for path, p in named:
        np.testing.assert_allclose(p.value, want[id(p)], rtol=1e-6, atol=1e-7, err_msg=path)
    other = AutoEncoder()
    wrong = AdamW([{"params": model.parameters()}, {"params": other.encoder.proj.parameters()}])
    with pytest.raises(
        ValueError,
        match=r"no prefix makes the paths \['weight', 'bias'\] of param_groups\[1\] gradients "
        r"of their shapes",
    ):
        wrong.step(grads_of("nanogpt"))


@pytest.mark.torch
def test_the_tied_gradient_and_adamw_steps_match_torch():
    """nanoGPT's tie in torch (nn.Embedding, nn.Linear, nn.LayerNorm), the same values: the
    gradient of the tied weight is the sum of its two uses, and AdamW with nanoGPT's decay
    split (torch: configure_optimizers' lists; js: the same split as pairs) agrees."""
    if torch is None:
        pytest.skip("torch is not installed")
    nn = torch.nn

    class TBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc, self.proj = nn.LayerNorm(C), nn.Linear(C, 2 * C), nn.Linear(2 * C, C)

        def forward(self, x):
            return x + self.proj(torch.tanh(self.fc(self.ln(x))))

    class TGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(
                dict(
                    wte=nn.Embedding(V, C),
                    wpe=nn.Embedding(T, C),
                    h=nn.ModuleList([TBlock()]),
                    ln_f=nn.LayerNorm(C),
                )
            )
            self.lm_head = nn.Linear(C, V, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # nanoGPT's tie

        def forward(self, idx):
            x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(idx.shape[1]))
            for block in self.transformer.h:
                x = block(x)
            return self.lm_head(self.transformer.ln_f(x))

    model, theirs = TinyGPT(), TGPT()
    theirs.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in model.state_dict().items()})
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    param_dict = dict(theirs.named_parameters())  # nanoGPT's configure_optimizers
    t_opt = torch.optim.AdamW(
        [
            {"params": [p for p in param_dict.values() if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in param_dict.values() if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=LR,
    )
    opt = AdamW(pairs(model), lr=LR)
    value_and_grad = js.jit(js.value_and_grad(loss_fn))
    idx = torch.tensor(np.asarray(IDX))
    for i in range(3):
        t_opt.zero_grad()
        t_loss = torch.mean(torch.log_softmax(theirs(idx), -1)[..., 0])
        t_loss.backward()
        loss, grads = value_and_grad(model, IDX)
        if i == 0:  # one gradient for the tie: the sum of the embedding's and the head's
            tied = flatten_state(grads)["lm_head.weight"]
            np.testing.assert_allclose(tied, theirs.lm_head.weight.grad, rtol=1e-5, atol=1e-7)
        t_opt.step()
        opt.step(grads)
        np.testing.assert_allclose(float(loss), t_loss.item(), rtol=1e-6)
    for name, p in theirs.named_parameters():
        got = model.state_dict()[name]
        np.testing.assert_allclose(got, p.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
