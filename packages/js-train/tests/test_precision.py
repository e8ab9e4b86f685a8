"""Mixed precision (bf16 compute, float32 parameters and optimizer state), Task's step checks,
ArrayLoader positions."""

import jax.numpy as jnp
import numpy as np
import pytest
from js_train_testing import MLP, FixedTask, blobs, make_optimizer

import js
from js.training import ArrayLoader, Task, Trainer, autocast, steps


def test_autocast_computes_in_bf16_and_keeps_float32_at_rest():
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    optimizer = make_optimizer(model)
    x, y = blobs(n=16)
    seen = []

    @js.jit
    def step(model, optimizer, x, y):
        def loss_fn(model):
            with autocast(model, jnp.bfloat16):
                seen.append(model.fc1.weight.value.dtype)
                logits = model(x.astype(jnp.bfloat16))
            seen.append(logits.dtype)
            return js.losses.cross_entropy(logits.astype(jnp.float32), y)

        loss, grads = js.value_and_grad(loss_fn)(model)
        seen.append({g.dtype for g in js._checks.flatten_state(grads).values()})
        optimizer.step(grads)
        return loss

    first = float(step(model, optimizer, jnp.asarray(x), jnp.asarray(y)))
    assert seen == [jnp.bfloat16, jnp.bfloat16, {np.dtype("float32")}]
    assert {v.dtype for v in model.state_dict().values()} == {np.dtype("float32")}
    moments = {k: v for k, v in optimizer.state_dict().items() if not k.startswith("param_groups.")}
    assert {np.asarray(v).dtype for v in moments.values()} <= {  # options: host float64
        np.dtype("float32"),
        np.dtype("int32"),
    }
    for _ in range(20):
        loss = float(step(model, optimizer, jnp.asarray(x), jnp.asarray(y)))
    assert loss < first and len(seen) == 3  # traced once: buffers kept their dtype


def test_bf16_reference_steps_follow_float32_closely():
    x, y = blobs(n=64)
    results = {}
    for dtype in (None, jnp.bfloat16):
        model = MLP(p=0.0, rngs=js.Rngs(params=0))
        task = Task(model, make_optimizer(model), compute_dtype=dtype)
        history = Trainer(3, verbose=False).fit(
            task, ArrayLoader(x, y, batch_size=16), ArrayLoader(x, y, batch_size=64)
        )
        results[dtype] = history[-1]
        assert model.fc1.weight.value.dtype == jnp.float32
    # bf16 keeps 8 bits of mantissa: after 3 epochs the two runs differ by tens of percent of
    # a small loss (0.21 against 0.17 with these weights), while both have learned (ln 3 = 1.1
    # at the start).
    assert results[jnp.bfloat16]["val/loss"] < 0.4 and results[None]["val/loss"] < 0.4
    assert results[jnp.bfloat16]["val/loss"] == pytest.approx(results[None]["val/loss"], rel=0.35)
    assert results[jnp.bfloat16]["val/loss"] != results[None]["val/loss"]  # really bf16


def test_compute_dtype_and_autocast_arguments_are_checked():
    model = MLP(rngs=js.Rngs(params=0))
    with pytest.raises(
        ValueError,
        match=r"Task: compute_dtype must be None, jnp.bfloat16, "
        r"jnp.float16 or jnp.float32, got 'int8'",
    ):
        Task(model, make_optimizer(model), compute_dtype="int8")
    with pytest.raises(TypeError, match="autocast: model must be a js.Module, got int"):
        with autocast(3):
            pass
    regression = steps.regression_eval_step(
        js.nn.Linear(4, 1, rngs=js.Rngs(params=0)),
        (np.ones((2, 4), np.float32), np.ones((2, 1), np.float32)),
        compute_dtype=jnp.bfloat16,
    )
    assert regression["loss"].dtype == jnp.float32


# -- Task: steps are functions of the state; no silent classification default -------------


def test_a_bare_task_refuses_labels_that_are_not_class_ids():
    model = js.nn.Linear(4, 2, rngs=js.Rngs(params=0))
    x = np.ones((8, 4), np.float32)
    with pytest.raises(
        TypeError,
        match=r"Task runs the default classification steps, which need "
        r"integer class labels y\[B\]; got y \[8, 2\] float32.*Fix: override "
        r"training_step",
    ):
        Trainer(1, verbose=False).fit(Task(model, make_optimizer(model)), [(x, x[:, :2])])


def test_overriding_only_one_step_or_the_old_signature_is_refused():
    model = js.nn.Linear(4, 2, rngs=js.Rngs(params=0))
    x = np.ones((8, 4), np.float32)

    class OnlyTrain(Task):
        def training_step(self, model, optimizer, rngs, batch):
            return steps.regression_step(model, optimizer, batch)

    with pytest.raises(
        NotImplementedError,
        match="OnlyTrain overrides training_step but not "
        "validation_step, which would silently run the default classification",
    ):
        Trainer(1, verbose=False).fit(OnlyTrain(model, make_optimizer(model)), [(x, x)])

    class Old(FixedTask):
        def training_step(self, batch):
            return {"loss": jnp.float32(1.0), "count": 1}

    with pytest.raises(
        TypeError,
        match=r"Old.training_step takes \(batch\), but the Trainer "
        r"calls it as training_step\(model, optimizer, rngs, batch\)",
    ):
        Trainer(1, verbose=False).fit(Old(), [(x, x)])

    class NoSteps:
        pass

    with pytest.raises(TypeError, match="the task NoSteps has no training_step"):
        Trainer(1).fit(NoSteps(), [(x, x)])


# -- ArrayLoader positions ----------------------------------------------------------------


def test_array_loader_state_resumes_mid_epoch():
    loader = ArrayLoader(np.arange(10), batch_size=3, shuffle=True, seed=2)
    whole = [b[0].tolist() for b in loader]
    loader.set_epoch(0)
    batches = iter(loader)
    first = next(batches)[0].tolist()
    state = loader.state_dict()
    assert state == {"epoch": 0, "batch": 1} and first == whole[0]
    again = ArrayLoader(np.arange(10), batch_size=3, shuffle=True, seed=2)
    again.load_state_dict(state)
    assert [b[0].tolist() for b in again] == whole[1:]
    assert again.state_dict() == {"epoch": 1, "batch": 0} and again.epoch == 1
    with pytest.raises(
        ValueError,
        match=r"batch 9 of epoch 0 is outside this loader's 4 "
        "batches per epoch",
    ):
        again.load_state_dict({"epoch": 0, "batch": 9})
