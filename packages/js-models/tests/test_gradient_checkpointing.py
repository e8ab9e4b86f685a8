"""gradient_checkpointing_enable()/disable() on GPT-2 and Llama: logits and gradients of the
plain model (dropout included), js.remat per block in training only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js.models.gpt2 import GPT2Config, GPT2LMHeadModel
from js.models.llama import LlamaConfig, LlamaForCausalLM


def _gpt2():
    config = GPT2Config(
        n_embd=16,
        n_layer=2,
        n_head=2,
        vocab_size=32,
        n_positions=16,
        resid_pdrop=0.1,
        embd_pdrop=0.1,
        attn_pdrop=0.1,
    )
    return GPT2LMHeadModel(config, rngs=js.Rngs(params=0))


def _llama():
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return LlamaForCausalLM(config, rngs=js.Rngs(params=0))


def _loss(model, ids, rngs):
    logits = model(ids, rngs=rngs) if rngs is not None else model(ids)
    return jnp.mean(jax.nn.log_softmax(logits)[..., 0])


def _inputs(model):
    """The token ids, and the ``Rngs`` to pass (GPT-2's dropout draws from a fresh stream)."""
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 32, size=(2, 8)))
    dropout = isinstance(model, GPT2LMHeadModel)
    return ids, (lambda: js.Rngs(dropout=7)) if dropout else (lambda: None)


@pytest.fixture(scope="module", params=[_gpt2, _llama], ids=["gpt2", "llama"])
def plain(request):
    """``(build, step, loss, grads)``: the plain model's jitted loss-and-gradient step and its
    result. Each of the two gradient programs (plain, checkpointed) takes ~2.5 s to compile on a
    2-core machine; built here, the plain one is paid by the first test that uses it
    (test_the_plain_step_is_not_checkpointed), so that no single test compiles both."""
    build = request.param
    model = build()
    ids, rngs = _inputs(model)
    step = js.jit(js.value_and_grad(_loss))
    loss, grads = step(model, ids, rngs())
    return build, step, loss, grads


def test_the_plain_step_is_not_checkpointed(plain):
    build, step, _, _ = plain
    model = build()
    ids, rngs = _inputs(model)
    assert not model.is_gradient_checkpointing
    assert "optimization_barrier" not in step.lower(model, ids, rngs()).as_text()


def test_gradients_unchanged(plain):
    build, step, plain_loss, plain_grads = plain
    model = build()
    ids, rngs = _inputs(model)
    model.gradient_checkpointing_enable({"use_reentrant": False})
    assert model.is_gradient_checkpointing
    text = step.lower(model, ids, rngs()).as_text()
    assert "optimization_barrier" in text  # the blocks are recomputed
    loss, grads = step(model, ids, rngs())
    np.testing.assert_allclose(loss, plain_loss, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(plain_grads), jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_logits_unchanged_in_evaluation(build):
    model = build()
    ids, _ = _inputs(model)
    model.gradient_checkpointing_enable({"use_reentrant": False})
    model.eval()  # evaluation: plain blocks, same logits
    forward = js.jit(lambda m, ids: m(ids))
    checkpointed_logits = forward(model, ids)
    model.gradient_checkpointing_disable()
    assert not model.is_gradient_checkpointing
    np.testing.assert_array_equal(forward(model, ids), checkpointed_logits)


def test_policy_and_bad_kwargs():
    model = _llama()
    model.gradient_checkpointing_enable({"policy": "dots_saveable"})
    assert model.model.gradient_checkpointing and model.model._checkpoint_policy is not None
    with pytest.raises(TypeError, match="unknown gradient_checkpointing_kwargs"):
        model.gradient_checkpointing_enable({"reentrant": True})
    with pytest.raises(ValueError, match="policy must be"):
        model.gradient_checkpointing_enable({"policy": "sometimes"})
