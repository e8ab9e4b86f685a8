"""ScannedStack: one lax.scan over identical blocks, with the unrolled ModuleList's names,
values and gradients; remat inside the loop halves (at least) the step's temporary memory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.nn as nn
import js.nn.functional as F


class Block(js.Module):
    """A pre-norm transformer block with dropout (small widths for tests)."""

    def __init__(self, width=16, heads=2, p=0.0, *, rngs):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, rngs=rngs)
        self.proj = nn.Linear(width, width, rngs=rngs)
        self.ln_2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width, rngs=rngs)
        self.out = nn.Linear(4 * width, width, rngs=rngs)
        self.drop = nn.Dropout(p)
        self.heads = heads

    def forward(self, x, mask=None, *, rngs=None):
        b, n, d = x.shape
        qkv = self.qkv(self.ln_1(x)).reshape(b, n, 3, self.heads, d // self.heads)
        q, k, v = (jnp.moveaxis(qkv[:, :, i], 1, 2) for i in range(3))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.drop(self.proj(jnp.moveaxis(a, 1, 2).reshape(b, n, d)), rngs=rngs)
        return x + self.drop(self.out(F.gelu(self.fc(self.ln_2(x)))), rngs=rngs)


class Net(js.Module):
    def __init__(self, depth=2, width=16, p=0.0, *, rngs, scanned=False, remat=False):
        super().__init__()
        blocks = [Block(width, p=p, rngs=rngs) for _ in range(depth)]
        self.h = nn.ScannedStack(blocks, remat=remat) if scanned else nn.ModuleList(blocks)

    def forward(self, x, mask=None, *, rngs=None):
        if isinstance(self.h, nn.ScannedStack):
            return self.h(x, mask, rngs=rngs)
        for block in self.h:
            x = block(x, mask, rngs=rngs)
        return x


def _loss(model, x, mask, rngs):
    return jnp.mean(model(x, mask, rngs=rngs) ** 2)


def _x(shape=(2, 8, 16), seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _mask(n=8):
    return jnp.tril(jnp.ones((n, n), bool))[None, None]


# Both in the full tier (~6 s each idle, 9 s beside another suite): the default run keeps the
# stack's per-layer values (test_buffers_are_threaded_per_layer) and its one-loop program.
@pytest.mark.slow
@pytest.mark.parametrize("remat", [False, True])
def test_names_values_and_gradients_equal_the_unrolled_list(remat):
    unrolled = Net(p=0.1, rngs=js.Rngs(params=0))
    scanned = Net(p=0.1, rngs=js.Rngs(params=1), scanned=True, remat=remat)
    assert list(scanned.state_dict()) == list(unrolled.state_dict())
    scanned.load_state_dict(unrolled.state_dict())
    x, mask = _x(), _mask()
    step = js.jit(js.value_and_grad(_loss))
    loss_a, grads_a = step(unrolled, x, mask, js.Rngs(dropout=5))  # dropout: same masks
    loss_b, grads_b = step(scanned, x, mask, js.Rngs(dropout=5))
    np.testing.assert_allclose(loss_a, loss_b, rtol=1e-5)
    for (pa, a), (pb, b) in zip(
        jax.tree_util.tree_leaves_with_path(grads_a),
        jax.tree_util.tree_leaves_with_path(grads_b),
        strict=True,
    ):
        assert pa == pb
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    # and back: the unrolled list loads the scanned stack's weights
    unrolled.load_state_dict({k: v * 2 for k, v in scanned.state_dict().items()})
    scanned.load_state_dict(unrolled.state_dict())
    again_a = step(unrolled, x, mask, js.Rngs(dropout=6))[0]  # the compiled programs again
    again_b = step(scanned, x, mask, js.Rngs(dropout=6))[0]
    np.testing.assert_allclose(again_a, again_b, rtol=1e-5)
    assert abs(float(again_a) - float(loss_a)) > 1e-3  # the doubled weights did load


def test_one_loop_and_a_program_that_does_not_grow_with_depth():
    x, mask = _x(), _mask()
    texts = {}
    for depth in (3, 12):
        for scanned in (False, True):
            model = Net(depth=depth, rngs=js.Rngs(params=0), scanned=scanned)
            lowered = js.jit(js.value_and_grad(_loss)).lower(model, x, mask, None)
            texts[depth, scanned] = lowered.as_text()
    assert texts[12, False].count("stablehlo.while") == 0
    assert texts[12, True].count("stablehlo.while") == 2  # the forward loop and its transpose
    # one block's program whatever the depth: only the stacking of the arrays grows
    grown = {s: len(texts[12, s]) - len(texts[3, s]) for s in (False, True)}
    assert grown[True] < grown[False] / 5, grown
    assert len(texts[12, True]) < len(texts[12, False]) / 2


@pytest.mark.slow  # ~6 s idle (the unrolled 12-block step); remat's one-loop program: above
def test_remat_halves_the_temporary_memory_of_a_12_block_step():
    x = _x((4, 64, 32))
    mask = _mask(64)
    sizes = {}
    for name, kwargs in {"plain": {}, "remat": {"scanned": True, "remat": True}}.items():
        model = Net(depth=12, width=32, rngs=js.Rngs(params=0), **kwargs)
        compiled = js.jit(js.value_and_grad(_loss)).lower(model, x, mask, None).compile()
        sizes[name] = compiled.memory_analysis().temp_size_in_bytes
    assert sizes["remat"] <= sizes["plain"] / 2, sizes


def test_buffers_are_threaded_per_layer():
    def block(i):
        return nn.Sequential(nn.Linear(3, 3, rngs=js.Rngs(params=i)), nn.BatchNorm1d(3))

    unrolled, scanned = nn.Sequential(*[block(i) for i in range(3)]), nn.ScannedStack(block, 3)
    scanned.load_state_dict(unrolled.state_dict())
    x = _x((5, 3))
    np.testing.assert_allclose(js.jit(lambda m, x: m(x))(scanned, x), unrolled(x), atol=1e-5)
    for key, value in unrolled.state_dict().items():
        np.testing.assert_allclose(scanned.state_dict()[key], value, atol=1e-6, err_msg=key)
    # changed, per layer: a later layer's batch mean is 0 up to rounding (the previous
    # BatchNorm centres it, the Linear's bias starts at 0), its variance is not 1
    variances = [np.asarray(scanned[i][1].running_var.value) for i in range(3)]
    assert all(np.abs(v - 1.0).max() > 1e-3 for v in variances)
    assert np.abs(variances[1] - variances[2]).max() > 1e-3


def test_bad_stacks_are_refused():
    rngs = js.Rngs(params=0)
    with pytest.raises(ValueError, match=r"block 1 differs .*bias"):
        nn.ScannedStack([nn.Linear(4, 4, rngs=rngs), nn.Linear(4, 4, bias=False, rngs=rngs)])

    class Scale(js.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = js.Parameter(jnp.ones(n))

        def forward(self, x):
            return x * self.weight.value

    with pytest.raises(ValueError, match=r"1\.weight has shape \[5\]"):
        nn.ScannedStack([Scale(4), Scale(5)])
    shared = nn.Linear(4, 4, rngs=rngs)
    with pytest.raises(ValueError, match="share"):
        nn.ScannedStack([shared, shared])
    with pytest.raises(TypeError, match="num_layers is required"):
        nn.ScannedStack(lambda i: nn.Linear(4, 4, rngs=rngs))
    with pytest.raises(ValueError, match="no blocks"):
        nn.ScannedStack([])
    with pytest.raises(ValueError, match="keep its structure"):
        nn.ScannedStack(lambda i: nn.Linear(4, 2, rngs=rngs), 2)(jnp.ones((1, 4)))
