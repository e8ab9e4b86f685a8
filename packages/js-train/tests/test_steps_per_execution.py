"""Trainer(steps_per_execution=K): K steps per dispatch give the losses and parameters of K
separate steps; a leftover partial group and a smaller last batch run as single steps."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec
from js_train_testing import MLP, blobs, make_optimizer

import js
from js.training import ArrayLoader, Task, Trainer
from js.training._loop import Feed
from js.training._schedule import Schedule, place_stacked


def _train(k, *, dropout, epochs=2, unroll=True):
    model = MLP(rngs=js.Rngs(params=0))
    rngs = js.Rngs(dropout=3) if dropout else None
    if not dropout:
        model.drop.p = 0.0
    task = Task(model, make_optimizer(model), rngs=rngs)
    x, y = blobs(n=90)  # batches of 8: 11 full ones and one of 2 -> groups of 4: 4 + 4 + 3 + 1
    trainer = Trainer(epochs, verbose=False, progress=False, steps_per_execution=k, unroll=unroll)
    history = trainer.fit(task, ArrayLoader(x, y, batch_size=8, shuffle=True, seed=1))
    return history, model.state_dict(), task.optimizer.state_dict()


@pytest.mark.parametrize("dropout, unroll", [(False, False), (True, True)])
def test_k_steps_per_dispatch_equal_k_separate_steps(dropout, unroll):
    one, params_one, opt_one = _train(1, dropout=dropout)
    many, params_many, opt_many = _train(4, dropout=dropout, unroll=unroll)
    for a, b in zip(one, many, strict=True):
        for key in ("train/loss", "train/count", "train/accuracy"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), key
    assert params_one.keys() == params_many.keys()
    for key in params_one:
        np.testing.assert_allclose(params_many[key], params_one[key], rtol=1e-5, atol=1e-6)
    assert int(opt_many["step_count"]) == int(opt_one["step_count"]) == 2 * 12
    for key in opt_one:
        np.testing.assert_allclose(opt_many[key], opt_one[key], rtol=1e-5, atol=1e-6)


def test_groups_stack_full_groups_and_run_the_rest_singly():
    feed = Feed(None, Schedule(max_epochs=1), k=3, many=object())
    batches = [np.ones((2, 1))] * 4 + [np.ones((1, 1))] + [np.ones((2, 1))] * 2
    dispatches = list(feed.dispatches([(b, i) for i, b in enumerate(batches)], 0))
    kinds = [
        (program is not None, np.shape(jax.tree.leaves(batch)[0]), n)
        for batch, n, _, program in dispatches
    ]
    assert [dispatch.state for dispatch in dispatches] == [2, 3, 4, 5, 6]  # each one's last
    assert kinds == [
        (True, (3, 2, 1), 3),  # 3 stacked
        (False, (2, 1), 1),
        (False, (1, 1), 1),
        (False, (2, 1), 1),  # shapes differ
        (False, (2, 1), 1),
    ]  # leftover


@pytest.mark.parametrize(
    "bad, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_steps_per_execution_is_checked(bad, error):
    with pytest.raises(error, match="steps_per_execution must be an int >= 1"):
        Trainer(1, steps_per_execution=bad)


@pytest.mark.parametrize("unroll", [True, False, 2])
def test_unroll_reaches_lax_scan(monkeypatch, unroll):
    seen = []

    def scan_steps(step, *, unroll):
        seen.append(unroll)
        return real(step, unroll=unroll)

    real = js.scan_steps
    monkeypatch.setattr(js, "scan_steps", scan_steps)
    x, y = blobs(n=8)
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    Trainer(1, verbose=False, steps_per_execution=2, unroll=unroll).fit(
        Task(model, make_optimizer(model)), ArrayLoader(x, y, batch_size=4)
    )
    assert seen == [unroll]


@pytest.mark.parametrize("bad", [0, 1.5, "yes"])
def test_unroll_is_checked(bad):
    with pytest.raises(
        TypeError,
        match=rf"Trainer unroll must be True, False or an int >= 1 "
        rf"\(steps unrolled per loop iteration\), got {bad!r}",
    ):
        Trainer(1, steps_per_execution=2, unroll=bad)


class _TracedTask(Task):
    """Counts the traces of its training step (a Python side effect runs only when traced)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.traces = []

    def training_step(self, model, optimizer, rngs, batch):
        self.traces.append(1)
        return super().training_step(model, optimizer, rngs, batch)

    def validation_step(self, model, batch):
        return super().validation_step(model, batch)


def test_a_second_fit_of_the_same_task_reuses_the_k_step_program():
    model = MLP(rngs=js.Rngs(params=0))
    task = _TracedTask(model, make_optimizer(model), rngs=js.Rngs(dropout=3))
    x, y = blobs(n=64)  # 8 batches of 8: two groups of 4 per epoch, nothing left over
    loader = ArrayLoader(x, y, batch_size=8)
    trainer = Trainer(1, verbose=False, progress=False, steps_per_execution=4)
    trainer.fit(task, loader)
    traced = len(task.traces)  # the scan traces the step once per unrolled step
    assert traced > 0
    Trainer(1, verbose=False, progress=False, steps_per_execution=4).fit(task, loader)
    assert len(task.traces) == traced  # a new Trainer, the same task: no new trace
    task.note = "another configuration"  # a rebound attribute the step might read: traced anew
    Trainer(1, verbose=False, progress=False, steps_per_execution=4).fit(task, loader)
    assert len(task.traces) > traced


def _one_device_mesh():
    from jax.sharding import AxisType

    return jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,))


def test_a_mesh_places_k_stacked_host_batches_once(monkeypatch):
    # K host batches are stacked with NumPy and placed once, the K axis whole
    mesh = _one_device_mesh()
    x, y = place_stacked((np.zeros((3, 4, 2)), np.zeros((3, 4))), mesh, "data")
    assert x.sharding.spec == PartitionSpec(None, "data") and y.shape == (3, 4)
    trainer = Trainer(1, verbose=False, progress=False, steps_per_execution=2, mesh=mesh)
    singles = []
    real = js.shard_batch
    monkeypatch.setattr(js, "shard_batch", lambda *a, **k: singles.append(1) or real(*a, **k))
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    xs, ys = blobs(n=16)
    trainer.fit(Task(model, make_optimizer(model)), ArrayLoader(xs, ys, batch_size=4))
    assert singles == []  # two dispatches of two stacked batches, none placed one by one


def test_a_stacked_batch_without_rows_is_refused():
    with pytest.raises(
        ValueError,
        match=r"the stacked batches \[K, B, \.\.\.\] are \[1\] \[3\]\. "
        r"Fix: use a global batch size divisible by 1",
    ):
        place_stacked((np.zeros((3, 4)), np.zeros(3)), _one_device_mesh(), "data")
