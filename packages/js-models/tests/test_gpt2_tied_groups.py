"""GPT-2's tied embedding (``lm_head.weight`` is ``transformer.wte.weight``) in every parameter
group form of js.optim (issue 37; js-optim's own tests hold the same with hand-made ties).

``named_parameters()`` names the tie ``transformer.wte.weight`` (as torch does), the gradients
``lm_head.weight`` (NNX's first path in sorted order): each form must find the one gradient,
the sum of both uses, and give the Parameter one AdamW state entry.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js._checks import flatten_state
from js.models import GPT2Config, GPT2LMHeadModel
from js.optim import AdamW, param_groups

# n_positions 12: the position table [12, 8] shares no shape with a matrix of the block
CONFIG = dict(n_embd=8, n_layer=1, n_head=2, vocab_size=13, n_positions=12)
IDS = jnp.asarray(np.random.default_rng(0).integers(0, 13, (2, 6)))
LR, EPS = 0.01, 1e-8


def gpt2():
    return GPT2LMHeadModel(GPT2Config(**CONFIG), rngs=js.Rngs(params=0)).eval()  # no dropout


def loss_fn(model, ids):
    return jnp.mean(jax.nn.log_softmax(model(ids))[..., 0])


@pytest.fixture(scope="module")
def grads():
    return js.jit(js.grad(loss_fn))(gpt2(), IDS)


def pairs(model):
    """nanoGPT's configure_optimizers split (decay the matrices), as (path, Parameter) pairs."""
    named = list(model.named_parameters())
    return [
        {"params": [(n, p) for n, p in named if p.ndim >= 2], "weight_decay": 0.1},
        {"params": [(n, p) for n, p in named if p.ndim < 2], "weight_decay": 0.0},
    ]


FORMS = {
    "parameters": lambda model: model.parameters(),
    "pairs": pairs,
    "submodule": lambda model: [{"params": model.transformer.parameters(), "lr": 0.02}],
    "list": lambda model: [
        {**pairs(model)[0], "params": [p for _, p in pairs(model)[0]["params"]]},
        pairs(model)[1],
    ],
    "param_groups": lambda model: param_groups(model, weight_decay=0.1),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_group_form_steps_gpt2s_tied_embedding(form, grads):
    model = gpt2()
    assert model.lm_head.weight is model.transformer.wte.weight
    names = [n for n, _ in model.named_parameters()]
    assert "transformer.wte.weight" in names and "lm_head.weight" not in names
    assert "lm_head.weight" in flatten_state(grads)
    opt = AdamW(FORMS[form](model), lr=LR)
    selection = model.parameters()  # knows each gradient's path, the tie's too
    by_id = {id(p): g for p, g in zip(selection, selection.match(grads), strict=True)}
    want = {}
    for group in opt.param_groups:  # AdamW's first step: the moments give g / (|g| + eps)
        lr, wd = group["lr"], group["weight_decay"]
        for p in group["params"]:
            g = np.asarray(by_id[id(p)])
            want[id(p)] = np.asarray(p.value) * (1 - lr * wd) - lr * g / (np.abs(g) + EPS)
    assert sorted(want) == sorted(id(p) for _, p in model.named_parameters())
    opt.step(grads)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.value, want[id(p)], rtol=1e-6, atol=1e-7, err_msg=name)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert len([k for k in opt.state_dict() if k.startswith("adam.mu.")]) == len(names)
