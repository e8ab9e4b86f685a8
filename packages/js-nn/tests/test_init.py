"""js.nn.init: torch's distributions and fans, in place, from explicit streams."""

from __future__ import annotations

import functools
import math
import os
import statistics
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.nn as nn
from js.nn import _random
from js.nn import init as init

SHAPE = (400, 100, 3)  # 120k values: sample std within ~0.5 % of the true one


def fresh(shape=SHAPE, dtype=jnp.float32):
    return js.Parameter(jnp.zeros(shape, dtype))


def values(param):
    return np.asarray(param.value, np.float64)


def test_uniform_normal_constant_fill_in_place_and_return_the_parameter():
    param = fresh()
    assert init.uniform_(param, -2.0, 3.0, seed=0) is param
    v = values(param)
    assert -2.0 <= v.min() < -1.99 and 2.99 < v.max() < 3.0
    # the mean within 4 standard errors (rtol 1e-2 on 0.5 was 1.2 of them)
    assert abs(v.mean() - 0.5) < 4 * 5 / math.sqrt(12 * v.size)
    np.testing.assert_allclose(v.std(), 5 / math.sqrt(12), rtol=1e-2)
    init.normal_(param, 1.0, 0.02, seed=1)
    np.testing.assert_allclose([values(param).mean(), values(param).std()], [1.0, 0.02], rtol=1e-2)
    assert init.constant_(param, 0.25) is param and np.all(values(param) == 0.25)
    assert np.all(values(init.ones_(param)) == 1) and np.all(values(init.zeros_(param)) == 0)


def test_the_normal_quantile_is_accurate_to_float64():
    p = np.array([1e-12, 1e-6, 0.001, 0.02, 0.0243, 0.1, 0.5, 0.77, 0.9757, 0.999, 1 - 1e-9])
    want = [statistics.NormalDist().inv_cdf(x) for x in p]
    np.testing.assert_allclose(_random.ndtri(p), want, rtol=2e-9)


def _words(key, size, half):
    seed = np.random.SeedSequence(np.asarray(jax.random.key_data(key), np.uint32).tolist())
    if not half:
        return np.random.PCG64(seed).random_raw(size)
    return np.random.PCG64(seed).random_raw((size + 1) // 2).astype("<u8").view("<u4")[:size]


def _whole_array_normal(key, size, mean, std, half=False):
    """The sampler's formula over the whole array at once: from 53-bit uniforms in float64 (as
    js-nn 0.1 computed every dtype), or (``half``) from 23-bit ones in float32, two numbers a
    64-bit word (float32 and narrower, since 0.2)."""
    words = _words(key, size, half)
    if half:
        p = ((words >> np.uint32(9)).astype(np.float32) + np.float32(0.5)) * np.float32(2**-23)
        mean, std = np.float32(mean), np.float32(std)
    else:
        p = ((words >> np.uint64(11)) + 0.5) * 2.0**-53

    def polyval(coefficients, x):
        result = np.zeros_like(x)
        for c in coefficients:
            result = result * x + c
        return result

    tail = np.minimum(p, 1.0 - p)
    q = np.sqrt(-2.0 * np.log(np.where(tail < _random._P_LOW, tail, 0.5)))
    low = polyval(_random._C, q) / (polyval(_random._D, q) * q + 1.0)
    r = (p - 0.5) ** 2
    central = (p - 0.5) * polyval(_random._A, r) / (polyval(_random._B, r) * r + 1.0)
    return mean + std * np.where(tail < _random._P_LOW, np.where(p < 0.5, low, -low), central)


@pytest.mark.parametrize("cores", [1, 3])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_the_blocked_sampler_gives_the_whole_array_formulas_bits(dtype, cores, monkeypatch):
    # blocks of 2**15 numbers; with 3 cores three threads each draw a stretch of the stream
    # from their own advanced copy of the generator: the same bits as the whole array at once
    monkeypatch.setattr(_random, "_cores", lambda: cores)
    monkeypatch.setattr(_random, "_pool", functools.cache(_random._pool.__wrapped__))
    key, size = jax.random.key(7), 13 * 2**15 + 5  # odd: the last word gives one number
    want = _whole_array_normal(key, size, 0.1, 0.02, half=True).astype(np.dtype(dtype))
    got = np.asarray(_random.normal(key, (size,), 0.1, 0.02, dtype))
    assert got.tobytes() == want.tobytes()
    unit = (_words(key, size, True) >> np.uint32(8)).astype(np.float32) * np.float32(2**-24)
    want = (np.float32(-0.3) + np.float32(0.6 - -0.3) * unit).astype(np.dtype(dtype))
    assert np.asarray(_random.uniform(key, (size,), -0.3, 0.6, dtype)).tobytes() == want.tobytes()
    standard = _random.standard_normal(key, (size,))  # float64: whole words, as in 0.1
    assert standard.tobytes() == _whole_array_normal(key, size, 0.0, 1.0).tobytes()


def test_float32_draws_stay_inside_the_open_interval_and_match_the_moments():
    # 23-bit uniforms (k + 0.5) / 2**23 are exact in float32 and never 0 or 1: no infinities
    key = jax.random.key(3)
    z = np.asarray(_random.normal(key, (1_000_000,), 0.0, 1.0))
    assert np.isfinite(z).all() and np.abs(z).max() < 5.4
    assert abs(z.mean()) < 3e-3 and abs(z.std() - 1.0) < 3e-3
    u = np.asarray(_random.uniform(key, (1_000_000,), -1.0, 2.0))
    assert u.min() >= -1.0 and u.max() < 2.0 and abs(u.mean() - 0.5) < 3e-3
    edges = np.array([0, 2**32 - 1], np.uint32)  # the extreme words give finite extremes
    p = _random._unit32(edges, 23, 0.5)
    assert 0.0 < p[0] < p[1] < 1.0


def test_kaiming_and_xavier_follow_torch_formulas():
    fan_in, fan_out = 100 * 3, 400 * 3
    cases = [
        (init.kaiming_uniform_, {"a": math.sqrt(5)}, math.sqrt(2 / 6) / math.sqrt(fan_in)),
        (
            init.kaiming_normal_,
            {"mode": "fan_out", "nonlinearity": "relu"},
            math.sqrt(2) / math.sqrt(fan_out),
        ),
        (init.xavier_uniform_, {"gain": 2.0}, 2.0 * math.sqrt(2 / (fan_in + fan_out))),
        (init.xavier_normal_, {}, math.sqrt(2 / (fan_in + fan_out))),
    ]
    for fn, kwargs, std in cases:
        v = values(fn(fresh(), **kwargs, seed=3))
        assert abs(v.mean()) < 0.01 * std, fn.__name__
        np.testing.assert_allclose(v.std(), std, rtol=1e-2, err_msg=fn.__name__)
        if fn.__name__.endswith("uniform_"):
            assert np.abs(v).max() <= math.sqrt(3) * std * (1 + 1e-6), fn.__name__


def test_trunc_normal_takes_absolute_bounds_as_torch():
    v = values(init.trunc_normal_(fresh(), mean=0.1, std=0.02, a=0.08, b=0.14, seed=0))
    assert 0.08 <= v.min() < 0.0801 and 0.1399 < v.max() <= 0.14
    # Moments of N(0.1, 0.02^2) truncated to [-1, 2] standard deviations.
    alpha, beta = -1.0, 2.0
    pdf = [math.exp(-(x**2) / 2) / math.sqrt(2 * math.pi) for x in (alpha, beta)]
    mass = statistics.NormalDist().cdf(beta) - statistics.NormalDist().cdf(alpha)
    mean = 0.1 + 0.02 * (pdf[0] - pdf[1]) / mass
    var = 0.02**2 * (1 + (alpha * pdf[0] - beta * pdf[1]) / mass - ((pdf[0] - pdf[1]) / mass) ** 2)
    np.testing.assert_allclose([v.mean(), v.std()], [mean, math.sqrt(var)], rtol=5e-3)


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (8, 3, 2, 2)])
def test_orthogonal_rows_or_columns_are_orthonormal_times_gain(shape):
    w = values(init.orthogonal_(fresh(shape), gain=2.0, seed=0)).reshape(shape[0], -1)
    small = min(w.shape)
    gram = w @ w.T if w.shape[0] == small else w.T @ w
    np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-5)


def test_same_seed_same_values_and_rngs_advance_the_params_stream():
    a, b = init.normal_(fresh((5, 5)), seed=7), init.normal_(fresh((5, 5)), seed=7)
    np.testing.assert_array_equal(values(a), values(b))
    rngs = js.Rngs(params=7)
    c = init.normal_(fresh((5, 5)), rngs=rngs)
    d = init.normal_(fresh((5, 5)), rngs=rngs)
    assert int(rngs.params.count[...]) == 2
    assert not np.array_equal(values(c), values(d))


def test_dtype_is_kept_and_zero_element_arrays_are_a_no_op():
    param = init.kaiming_uniform_(fresh((4, 3), jnp.bfloat16), seed=0)
    assert param.value.dtype == jnp.bfloat16 and param.value.shape == (4, 3)
    empty = fresh((0, 3))
    for fn in (init.kaiming_normal_, init.xavier_uniform_, init.orthogonal_):
        assert fn(empty, seed=0).value.shape == (0, 3)


def test_dcgan_weights_init_through_apply():
    rngs = js.Rngs(params=0)

    def weights_init(m):  # the DCGAN tutorial's function, with rngs= added
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            nn.init.normal_(m.weight.data, 0.0, 0.02, rngs=rngs)
        elif classname.find("BatchNorm") != -1:
            nn.init.normal_(m.weight.data, 1.0, 0.02, rngs=rngs)
            nn.init.constant_(m.bias.data, 0)

    model = nn.Sequential(
        nn.Conv2d(3, 64, 4, rngs=rngs),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.Conv2d(64, 64, 4, rngs=rngs),
        nn.BatchNorm2d(64),
    )
    model.apply(weights_init)
    for conv in (model[0], model[3]):
        assert abs(float(jnp.std(conv.weight.value)) - 0.02) < 2e-3
    for bn in (model[1], model[4]):
        assert abs(float(jnp.mean(bn.weight.value)) - 1.0) < 0.01
        assert float(jnp.abs(bn.bias.value).sum()) == 0.0


def test_traced_keys_fall_back_to_jax_random():
    key = jax.random.key(0)
    traced = jax.jit(lambda k: _random.uniform(k, (1000,), -1.0, 1.0))(key)
    assert traced.dtype == jnp.float32 and float(jnp.abs(traced).max()) <= 1.0
    assert float(jnp.std(jax.jit(lambda k: _random.normal(k, (1000,), 0.0, 2.0))(key))) > 1.5
    bounded = jax.jit(lambda k: _random.truncated_normal(k, (100,), 1.0, 1.0, 0.0, 1.5))(key)
    assert 0.0 <= float(bounded.min()) and float(bounded.max()) <= 1.5


@pytest.mark.process
@pytest.mark.slow
def test_layer_weights_are_drawn_without_x64_dtypes():
    # Built on the host in float32 whatever jax_enable_x64 says (x64 in a subprocess).
    code = (
        "import jax, js, js.nn as nn\n"
        "lin = nn.Linear(300, 200, rngs=js.Rngs(params=0))\n"
        "emb = nn.Embedding(500, 64, rngs=js.Rngs(params=0))\n"
        "others = [nn.BatchNorm2d(3), nn.LayerNorm(4), nn.LSTM(3, 4, rngs=js.Rngs(params=0)),\n"
        "          nn.MultiheadAttention(4, 2, rngs=js.Rngs(params=0))]\n"
        "assert all(a.dtype == 'float32' for m in others for a in m.state_dict().values())\n"
        "print(lin.weight.value.dtype, lin.bias.value.dtype, emb.weight.value.dtype,\n"
        "      float(abs(lin.weight.value).max()) <= 300 ** -0.5, float(emb.weight.value.std()))\n"
    )
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    *dtypes, bounded, std = out.stdout.split()
    assert dtypes == ["float32"] * 3 and bounded == "True" and abs(float(std) - 1) < 0.02


@pytest.mark.process
@pytest.mark.slow
def test_sharding_is_kept():
    code = (
        "import jax, jax.numpy as jnp, numpy as np, js, js.nn as nn\n"
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n"
        "mesh = Mesh(np.array(jax.devices()), ('x',))\n"
        "sharding = NamedSharding(mesh, P('x', None))\n"
        "w = js.Parameter(jax.device_put(jnp.zeros((8, 4)), sharding))\n"
        "for fn in (nn.init.kaiming_uniform_, nn.init.orthogonal_, nn.init.trunc_normal_):\n"
        "    assert fn(w, seed=0).value.sharding == sharding, fn\n"
        "assert nn.init.zeros_(w).value.sharding == sharding\n"
        "one = jax.device_put(jnp.zeros((3, 2)), jax.devices()[1])\n"
        "assert nn.init.normal_(js.Parameter(one), seed=0).value.devices() == {jax.devices()[1]}\n"
        "free = nn.init.normal_(js.Parameter(jnp.zeros((3, 2))), seed=0).value\n"
        "assert not free.committed\n"
        "print('ok')\n"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_errors_name_the_problem_and_the_fix():
    param = fresh((3, 2))
    with pytest.raises(ValueError, match=r"exactly one of rngs= or seed=, got neither"):
        init.normal_(param)
    with pytest.raises(ValueError, match=r"got both. Fix: .*js has no global generator"):
        init.normal_(param, rngs=js.Rngs(params=0), seed=0)
    with pytest.raises(TypeError, match=r"normal_: seed must be an int, got 1.5 \(a float\)"):
        init.normal_(param, seed=1.5)
    with pytest.raises(TypeError, match=r"writes a Parameter in place; got ArrayImpl.*m.weight"):
        init.normal_(param.value, seed=0)
    with pytest.raises(TypeError, match=r"expected a Parameter, got list"):
        init.calculate_fan_in_and_fan_out([1, 2])
    with pytest.raises(ValueError, match=r"at least 2 dimensions, got shape \[3\]"):
        init.xavier_uniform_(fresh((3,)), seed=0)
    with pytest.raises(ValueError, match=r"orthogonal_: needs at least 2 dimensions"):
        init.orthogonal_(fresh((3,)), seed=0)
    with pytest.raises(ValueError, match=r"mode 'fan_avg' is not supported"):
        init.kaiming_normal_(param, mode="fan_avg", seed=0)
    with pytest.raises(ValueError, match=r"unsupported nonlinearity 'swish'"):
        init.kaiming_uniform_(param, nonlinearity="swish", seed=0)
    with pytest.raises(ValueError, match=r"negative_slope True is not a number"):
        init.calculate_gain("leaky_relu", True)
    with pytest.raises(ValueError, match=r"uniform_: expected a <= b, got a=1, b=0"):
        init.uniform_(param, 1, 0, seed=0)
    with pytest.raises(ValueError, match=r"normal_: expected std >= 0, got std=-1"):
        init.normal_(param, 0, -1, seed=0)
    with pytest.raises(ValueError, match=r"expected std > 0 and a < b, got std=1.0, a=2, b=1"):
        init.trunc_normal_(param, a=2, b=1, seed=0)
    rngs = js.Rngs(params=0)
    with pytest.raises(ValueError, match="mode"):
        init.kaiming_uniform_(param, mode="bad", rngs=rngs)
    assert int(rngs.params.count[...]) == 0  # refused before the stream moved
    np.testing.assert_array_equal(values(param), 0.0)


@pytest.mark.torch
def test_fans_and_gains_equal_torch():
    torch = pytest.importorskip("torch")
    tinit = torch.nn.init
    rngs = js.Rngs(params=0)
    layers = [
        (nn.Linear(7, 5, rngs=rngs), torch.nn.Linear(7, 5)),
        (nn.Conv1d(4, 6, 3, groups=2, rngs=rngs), torch.nn.Conv1d(4, 6, 3, groups=2)),
        (nn.Conv2d(3, 8, (3, 2), rngs=rngs), torch.nn.Conv2d(3, 8, (3, 2))),
    ]
    for ours, theirs in layers:
        assert ours.weight.value.shape == tuple(theirs.weight.shape)
        assert init.calculate_fan_in_and_fan_out(ours.weight) == (
            tinit._calculate_fan_in_and_fan_out(theirs.weight)
        )
    for shape in [(5, 3), (2, 3, 4), (8, 4, 3, 3, 2)]:
        assert init._calculate_fan_in_and_fan_out(jnp.zeros(shape)) == (
            tinit._calculate_fan_in_and_fan_out(torch.empty(shape))
        )
    names = ["linear", "conv2d", "conv_transpose3d", "sigmoid", "tanh", "relu", "selu"]
    for name in names:
        assert init.calculate_gain(name) == pytest.approx(tinit.calculate_gain(name))
    for slope in (None, 0.2, 1):
        assert init.calculate_gain("leaky_relu", slope) == pytest.approx(
            tinit.calculate_gain("leaky_relu", slope)
        )


@pytest.mark.torch
def test_distributions_match_torch_samples():
    torch = pytest.importorskip("torch")
    tinit = torch.nn.init
    torch.manual_seed(0)
    cases = [
        ("uniform_", (-0.5, 2.0), {}),
        ("normal_", (0.3, 0.7), {}),
        ("trunc_normal_", (0.0, 1.0, -0.5, 1.5), {}),
        ("xavier_uniform_", (), {"gain": 1.5}),
        ("xavier_normal_", (), {}),
        ("kaiming_uniform_", (), {"a": math.sqrt(5)}),
        ("kaiming_uniform_", (), {"mode": "fan_out", "nonlinearity": "tanh"}),
        ("kaiming_normal_", (), {"mode": "fan_out", "nonlinearity": "relu"}),
        ("orthogonal_", (), {"gain": 0.5}),
    ]
    for name, args, kwargs in cases:
        theirs = getattr(tinit, name)(torch.empty(SHAPE), *args, **kwargs).double().numpy()
        ours = values(getattr(init, name)(fresh(), *args, **kwargs, seed=0))
        # Moments and quantiles; the extremes only where the support is bounded.
        bounded = name.endswith("uniform_") or name == "trunc_normal_"
        quantiles = [0, 1, 50, 99, 100] if bounded else [1, 50, 99]
        got, want = ([v.mean(), v.std(), *np.percentile(v, quantiles)] for v in (ours, theirs))
        np.testing.assert_allclose(
            got,
            want,
            rtol=0.02,
            atol=0.02 * theirs.std(),
            err_msg=f"{name} {kwargs}",
        )


def test_init_imports_as_a_module_like_torch():
    import js.nn.init as imported
    from js.nn.init import trunc_normal_

    assert imported is nn.init and trunc_normal_ is nn.init.trunc_normal_
    assert init._calculate_fan_in_and_fan_out is init.calculate_fan_in_and_fan_out
