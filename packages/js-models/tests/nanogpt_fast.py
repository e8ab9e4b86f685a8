"""Two fast ways to sample from the nanoGPT port (``nanogpt_port.GPT``), as docs/porting.md
shows them: its ``generate`` loop as one compiled step over a fixed-size buffer, and its
weights in ``js.models.GPT2LMHeadModel`` (the same network) for ``js.models.generate``'s
key-value cache. The port's own ``generate`` runs eagerly and compiles every operation again
for each new sequence length."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import js
import js.models


@functools.partial(js.jit, static_argnames="top_k")
def _next_token(model, buf, t, key, temperature, top_k):
    """The token after ``buf[:, :t]``; ``buf`` is ``[B, L]``, padded on the right."""
    logits, _ = model(buf, buf)  # given targets, nanoGPT returns every position's logits
    logits = jax.lax.dynamic_index_in_dim(logits, t - 1, axis=1, keepdims=False)  # [B, V]
    logits = logits / temperature
    if top_k is not None:
        v, _ = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))
        logits = jnp.where(logits < v[:, [-1]], -jnp.inf, logits)
    return jax.random.categorical(key, logits)  # [B]


def fixed_buffer_generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, *, rngs):
    """nanoGPT's ``generate``, the same loop and the same cropping to ``block_size``, with the
    model run by one compiled program per buffer length: the context sits at the left of a
    ``[B, L]`` buffer, ``L`` the next of 16, 32, 64, ... (at most ``block_size``), whose padding
    causal attention never lets the real positions see. A few programs serve every length, and
    a step costs a forward over ``L`` positions (no cache); returns ``[B, T + n]`` NumPy ids."""
    size = model.config.block_size
    idx = np.asarray(idx)
    for _ in range(max_new_tokens):
        window = idx[:, -size:]
        t = window.shape[1]
        buf = np.zeros((idx.shape[0], min(size, max(16, 1 << (t - 1).bit_length()))), np.int32)
        buf[:, :t] = window
        token = _next_token(model, buf, np.int32(t), rngs.next("sample"), temperature, top_k)
        idx = np.concatenate([idx, np.asarray(token)[:, None]], axis=1)
    return idx


# nanoGPT's Linear weights are [out, in]; GPT-2's files (and js.models) keep these four [in, out]
TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def to_gpt2(model) -> js.models.GPT2LMHeadModel:
    """The port's weights in ``js.models.GPT2LMHeadModel`` (``from_pretrained`` in reverse).

    nanoGPT's GELU is the exact one (GPT-2's files say ``gelu_new``, the tanh form), its biases
    may be off (``bias=False``: zeros here), and its vocabulary may be padded (50304)."""
    c = model.config
    config = js.models.GPT2Config(
        vocab_size=c.vocab_size,
        n_positions=c.block_size,
        n_embd=c.n_embd,
        n_layer=c.n_layer,
        n_head=c.n_head,
        activation_function="gelu",
        eos_token_id=None,
        pad_token_id=0,
    )
    gpt2 = js.models.GPT2LMHeadModel(config, rngs=js.Rngs(params=0))
    ours = model.state_dict()
    state = {}
    for name, value in gpt2.state_dict().items():
        if name not in ours:  # a bias nanoGPT was built without
            state[name] = np.zeros_like(value)
        elif name.endswith(TRANSPOSED):
            state[name] = ours[name].T
        else:
            state[name] = ours[name]
    gpt2.load_state_dict(state)
    gpt2.eval()
    return gpt2
