import jax
import jax.numpy as jnp
import numpy as np
import pytest
from js_train_testing import MLP, make_optimizer

import js
import js.nn as nn
from js.training import ArrayLoader, Task, Trainer, steps


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
    x = np.stack([series[i : i + 10] for i in range(180)])  # [180, 10] windows
    y = series[10:190][:, None]  # [180, 1] next values
    model = nn.Linear(10, 1, rngs=js.Rngs(params=0))
    optimizer = make_optimizer(model, lr=0.02)
    first = float(steps.regression_eval_step(model, (x, y))["loss"])
    for _ in range(30):
        metrics = steps.regression_step(model, optimizer, {"x": x, "y": y})
    assert int(metrics["count"]) == 180 and float(metrics["loss"]) < first / 4


def test_regression_mask_drops_rows_from_the_loss_and_its_gradient():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 3)).astype(np.float32), rng.normal(size=(12, 2)).astype(np.float32)
    mask = np.arange(12) % 3 != 0  # 8 kept rows
    y_bad = np.where(mask[:, None], y, 1e6).astype(np.float32)  # dropped rows are way off
    model = nn.Linear(3, 2, rngs=js.Rngs(params=0))
    full = steps.regression_eval_step(model, (x, y_bad, mask))
    part = steps.regression_eval_step(model, (x[mask], y[mask]))
    assert int(full["count"]) == 8
    np.testing.assert_allclose(float(full["loss"]), float(part["loss"]), rtol=1e-6)

    masked, subset = (nn.Linear(3, 2, rngs=js.Rngs(params=0)) for _ in range(2))
    a = steps.regression_step(masked, make_optimizer(masked), {"x": x, "y": y_bad, "mask": mask})
    b = steps.regression_step(subset, make_optimizer(subset), (x[mask], y[mask]))
    np.testing.assert_allclose(float(a["loss"]), float(b["loss"]), rtol=1e-6)
    for key, value in subset.state_dict().items():
        np.testing.assert_allclose(masked.state_dict()[key], value, rtol=1e-6, err_msg=key)


def test_trainer_averages_masked_regression_losses_by_kept_rows():
    class Forecast(Task):
        def training_step(self, model, optimizer, rngs, batch):
            return steps.regression_step(model, optimizer, batch)

        def validation_step(self, model, batch):
            return steps.regression_eval_step(model, batch)

    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(10, 3)).astype(np.float32), rng.normal(size=(10, 1)).astype(np.float32)
    mask = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 1], bool)  # batches of 5 keep 4 and 1 rows
    model = nn.Linear(3, 1, rngs=js.Rngs(params=0))
    history = Trainer(1, verbose=False).fit(
        Forecast(model, make_optimizer(model)),
        [(x, y, mask)],
        ArrayLoader(x, np.where(mask[:, None], y, 1e6).astype(np.float32), mask, batch_size=5),
    )
    kept_mse = float(np.mean((np.asarray(model(x[mask])) - y[mask]) ** 2))  # over all 5 rows
    assert history[0]["val/count"] == 5.0
    assert history[0]["val/loss"] == pytest.approx(kept_mse, rel=1e-5)


def test_autoencoder_step_reduces_reconstruction_error():
    x = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
    model = nn.Sequential(
        nn.Linear(8, 4, rngs=js.Rngs(params=0)), nn.Linear(4, 8, rngs=js.Rngs(params=1))
    )
    optimizer = make_optimizer(model, lr=0.02)
    first = float(steps.autoencoder_eval_step(model, x)["loss"])
    for _ in range(20):
        metrics = steps.autoencoder_step(model, optimizer, (x,))
    assert int(metrics["count"]) == 64 and float(metrics["loss"]) < first


def test_gan_steps_differentiate_only_their_own_module():
    rngs = js.Rngs(params=0, noise=1)
    generator = nn.Sequential(nn.Linear(2, 8, rngs=rngs), nn.ReLU(), nn.Linear(8, 2, rngs=rngs))
    discriminator = nn.Sequential(nn.Linear(2, 8, rngs=rngs), nn.ReLU(), nn.Linear(8, 1, rngs=rngs))
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
