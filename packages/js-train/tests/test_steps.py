import jax
import jax.numpy as jnp
import numpy as np
import pytest
from js_train_testing import MLP, make_optimizer

import js
import js.nn as nn
from js.training import steps


def snapshot(model):
    return {k: v.copy() for k, v in model.state_dict().items()}


def changed(before, model):
    return {k for k, v in model.state_dict().items() if not np.array_equal(v, before[k])}


def test_classification_step_updates_in_place_and_counts(data):
    x, y = data
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    optimizer = make_optimizer(model)
    before = snapshot(model)
    metrics = steps.classification_step(model, optimizer, (x, y))
    assert all(isinstance(v, jax.Array) for v in metrics.values())  # still on the device
    assert int(metrics["count"]) == len(y)
    assert 0 <= int(metrics["correct"]) <= len(y)
    assert "fc1.weight" in changed(before, model) and int(optimizer.step_count) == 1


def test_mask_drops_examples_from_loss_count_and_correct(data):
    x, y = data
    model = MLP(p=0.0, rngs=js.Rngs(params=0)).eval()
    mask = np.arange(len(y)) < 10
    full = steps.classification_eval_step(model, {"x": x, "y": y, "mask": mask})
    part = steps.classification_eval_step(model, (x[:10], y[:10]))
    assert int(full["count"]) == 10 and int(full["correct"]) == int(part["correct"])
    np.testing.assert_allclose(float(full["loss"]), float(part["loss"]), rtol=1e-6)


def test_dropout_step_advances_the_dropout_stream(data):
    x, y = data
    model, rngs = MLP(p=0.5, rngs=js.Rngs(params=0)), js.Rngs(dropout=1)
    optimizer = make_optimizer(model)
    steps.dropout_classification_step(model, optimizer, (x, y), rngs)
    steps.dropout_classification_step(model, optimizer, (x, y), rngs)
    assert int(rngs.state_dict()["dropout.count"]) == 2


def test_bad_batches_are_named():
    model = MLP(rngs=js.Rngs(params=0))
    with pytest.raises(ValueError, match=r"a supervised batch is \(x, y\).*tuple of length 4"):
        steps.classification_eval_step(model, (1, 2, 3, 4))


def test_regression_step_fits_a_forecaster():  # the LSTM version is docs/examples/lstm_forecast
    t = np.arange(200, dtype=np.float32)
    series = np.sin(t / 5)
    x = np.stack([series[i:i + 10] for i in range(180)])  # [180, 10] windows
    y = series[10:190][:, None]  # [180, 1] next values
    model = nn.Linear(10, 1, rngs=js.Rngs(params=0))
    optimizer = make_optimizer(model, lr=0.02)
    first = float(steps.regression_eval_step(model, (x, y))["loss"])
    for _ in range(30):
        metrics = steps.regression_step(model, optimizer, {"x": x, "y": y})
    assert int(metrics["count"]) == 180 and float(metrics["loss"]) < first / 4


def test_autoencoder_step_reduces_reconstruction_error():
    x = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
    model = nn.Sequential(nn.Linear(8, 4, rngs=js.Rngs(params=0)),
                          nn.Linear(4, 8, rngs=js.Rngs(params=1)))
    optimizer = make_optimizer(model, lr=0.02)
    first = float(steps.autoencoder_eval_step(model, x)["loss"])
    for _ in range(20):
        metrics = steps.autoencoder_step(model, optimizer, (x,))
    assert int(metrics["count"]) == 64 and float(metrics["loss"]) < first


def test_gan_steps_differentiate_only_their_own_module():
    rngs = js.Rngs(params=0, noise=1)
    generator = nn.Sequential(nn.Linear(2, 8, rngs=rngs), nn.ReLU(), nn.Linear(8, 2, rngs=rngs))
    discriminator = nn.Sequential(nn.Linear(2, 8, rngs=rngs), nn.ReLU(),
                                  nn.Linear(8, 1, rngs=rngs))
    g_opt, d_opt = make_optimizer(generator), make_optimizer(discriminator)
    real = jnp.ones((16, 2))
    g_before, d_before = snapshot(generator), snapshot(discriminator)
    d = steps.discriminator_step(discriminator, generator, d_opt, real, rngs, latent_dim=2)
    assert changed(g_before, generator) == set() and changed(d_before, discriminator)
    d_before = snapshot(discriminator)
    g = steps.generator_step(generator, discriminator, g_opt, real, rngs, latent_dim=2)
    assert changed(d_before, discriminator) == set() and changed(g_before, generator)
    assert int(d["count"]) == int(g["count"]) == 16 and int(rngs.state_dict()["noise.count"]) == 2
    assert int(d_opt.step_count) == int(g_opt.step_count) == 1
