"""The perf/* and mem/* columns of the Trainer's rows, and measure_peak_flops."""

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from js_train_testing import MLP, FixedTask, blobs, make_optimizer

import js
from js.training import ArrayLoader, CSVRun, Task, Trainer, measure_peak_flops, steps
from js.training._perf import _PEAKS, _PROGRAMS
from js.training._task import scanned_training_step

BATCH = 16


def _task():
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    return Task(model, make_optimizer(model))  # no Rngs: the plain classification_step


def _fit(**options):
    x, y = blobs()
    options = {"verbose": False, "progress": False, "log_every_n_steps": 2, **options}
    trainer = Trainer(2, **options)
    history = trainer.fit(_task(), ArrayLoader(x, y, batch_size=BATCH))
    return trainer, history


def _first_batch():
    x, y = blobs()
    return jnp.asarray(x[:BATCH]), jnp.asarray(y[:BATCH])


def _own_step():
    """The compiled program a Task without Rngs runs for one step (its own call, options
    included: they select the program)."""
    task = _task()
    options = dict(compute_dtype=None, clip_grad_norm=None, clip_grad_value=None)
    step = steps.classification_step
    return step.lower(task.model, task.optimizer, _first_batch(), **options).compile()


def _memory_sum(compiled) -> float:
    memory = compiled.memory_analysis()
    return float(
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )


PEAK, BLOCK = 1e9, 64


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    """The same fit with the perf columns (a given peak, tokens, a CSV run) and without them:
    fitted once for the module."""
    folder = tmp_path_factory.mktemp("perf")
    on = _fit(peak_flops=PEAK, tokens_per_sample=BLOCK, run=CSVRun(folder))
    off = _fit(perf_metrics=False)
    return {"on": on, "off": off, "csv": folder / "metrics.csv"}


@pytest.fixture(scope="module")
def several():
    """The fit with two steps per execution and the measured peak, fitted once for the module.
    Apart from ``fits``, so that no one test sets up every fit and the peak's measurement (a
    2048 matmul, run six times); the first test to use it has little work of its own."""
    return _fit(steps_per_execution=2, log_every_n_steps=None, peak_flops="measure")


def test_every_train_row_has_the_columns(fits):
    _, history = fits["on"]
    assert len(history) == 6  # logs at steps 2, 4, 6 (the epoch's end) per epoch of 6 steps
    for row in history:
        assert row["perf/samples_per_s"] == row["time/samples_per_s"]  # one rate, two names
        assert row["perf/steps_per_s"] == pytest.approx(row["perf/samples_per_s"] / BATCH)
        assert row["perf/flops_per_step"] > 0 and row["mem/program_bytes"] > 0
        assert "mem/peak_device_bytes" not in row  # the CPU reports no memory_stats
    assert jax.devices()[0].memory_stats() is None
    names = list(history[-1])
    assert names.index("time/samples_per_s") < names.index("perf/samples_per_s")
    assert names.index("perf/mfu") < names.index("mem/program_bytes")
    header = fits["csv"].read_text().splitlines()[0].split(",")  # and so in every run
    assert {"perf/samples_per_s", "perf/flops_per_step", "mem/program_bytes"} <= set(header)


def test_flops_and_memory_are_the_training_steps_own(fits):
    _, history = fits["on"]
    own = _own_step()
    flops = own.cost_analysis()["flops"]
    assert flops > 0
    assert {row["perf/flops_per_step"] for row in history} == {flops}
    assert {row["mem/program_bytes"] for row in history} == {_memory_sum(own)}


def test_peak_flops_measure_uses_the_measured_peak(several):
    _, history = several
    peak = measure_peak_flops()  # measured by the fit, cached: the same number
    for row in history:
        expected = row["perf/flops_per_step"] * row["perf/steps_per_s"] / peak
        assert row["perf/mfu"] == pytest.approx(expected, rel=1e-12)
        assert "perf/tokens_per_s" not in row  # no tokens_per_sample


def test_several_steps_per_execution_report_the_k_step_programs_flops_per_step(several):
    _, history = several
    task = _task()
    # the K-step program (unroll=True: every step counted) that ran, its FLOPs over K: one
    # step's own plus its share of the scan's slicing and stacking (no second trace for one)
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), _first_batch())
    many = scanned_training_step(task, True).lower(task.model, task.optimizer, None, stacked)
    many = many.compile()
    assert {row["perf/flops_per_step"] for row in history} == {many.cost_analysis()["flops"] / 2}
    one_step = _own_step().cost_analysis()["flops"]
    assert history[0]["perf/flops_per_step"] == pytest.approx(one_step, rel=0.05)
    # mem/: the K-step program's, the one that runs most (JAX's own analysis of it)
    assert {row["mem/program_bytes"] for row in history} == {_memory_sum(many)}


def test_mfu_and_tokens_follow_the_rows_numbers(fits):
    _, history = fits["on"]
    for row in history:
        expected = row["perf/flops_per_step"] * row["perf/steps_per_s"] / PEAK
        assert row["perf/mfu"] == pytest.approx(expected, rel=1e-12)
        assert row["perf/tokens_per_s"] == pytest.approx(row["perf/samples_per_s"] * BLOCK)


def test_perf_columns_cost_no_device_read_and_change_no_number(fits):
    (on, with_perf), (off, without) = fits["on"], fits["off"]
    assert on.transfers == off.transfers == 6  # one read per log row, none for perf/mem
    assert [r["train/loss"] for r in with_perf] == [r["train/loss"] for r in without]
    assert not any(k.startswith(("perf/", "mem/")) for row in without for k in row)
    assert [r["time/samples_per_s"] > 0 for r in without] == [True] * 6


def test_a_step_that_cannot_be_traced_warns_and_keeps_training():
    class HostStep(FixedTask):  # reads its loss to the host: runs eagerly, cannot be traced
        def training_step(self, model, optimizer, rngs, batch):
            x, y = batch
            return {"loss": float(np.mean(x)), "count": len(x)}

    x = np.ones(4, np.float32)
    with pytest.warns(RuntimeWarning, match="perf/flops_per_step"):
        history = Trainer(1, verbose=False).fit(HostStep(), [(x, x)])
    assert "perf/samples_per_s" in history[0] and "perf/flops_per_step" not in history[0]


def test_an_eager_step_is_traced_once_more_for_its_figure_and_not_kept_alive():
    class Eager(FixedTask):  # calls no js.jit program: nothing compiled to reuse
        calls = 0

        def training_step(self, model, optimizer, rngs, batch):
            type(self).calls += 1
            return super().training_step(model, optimizer, rngs, batch)

    x = np.ones(4, np.float32)
    task = Eager()
    history = Trainer(1, verbose=False).fit(task, [(x, x), (x, x)])
    assert Eager.calls == 3  # two steps and the one trace of the analysis
    assert all(row["perf/flops_per_step"] > 0 for row in history)
    assert task in _PROGRAMS  # kept for the next fit of this task
    task_ref = weakref.ref(task)
    del task
    gc.collect()
    assert task_ref() is None  # and gone with it


@pytest.mark.parametrize("k", [1, 2])
def test_a_validation_inside_the_first_dispatch_leaves_its_figure_alone(k):
    # the first dispatch reaches a validation (eval mode, programs of its own) before its
    # row: the step's programs are analysed before it, in the train mode they ran in
    model = MLP(p=0.2, rngs=js.Rngs(params=0))
    task = Task(model, make_optimizer(model), rngs=js.Rngs(dropout=1))
    x, y = blobs(n=4 * BATCH)
    trainer = Trainer(1, verbose=False, steps_per_execution=k, val_every_n_steps=k)
    history = trainer.fit(task, ArrayLoader(x, y, batch_size=BATCH), [(x[:BATCH], y[:BATCH])])
    assert history[-1]["perf/flops_per_step"] > 0 and history[-1]["mem/program_bytes"] > 0


def test_measured_peak_is_a_cached_positive_rate():
    peak = measure_peak_flops(128, jnp.float32)
    assert isinstance(peak, float) and peak > 0
    assert measure_peak_flops(128, jnp.float32) == peak
    device = jax.devices()[0]
    assert _PEAKS[(device.platform, device.id, "float32", 128)] == peak
    assert measure_peak_flops(128, jnp.bfloat16) != peak or (  # another dtype: its own entry
        (device.platform, device.id, "bfloat16", 128) in _PEAKS
    )


class CountingTask(Task):
    """The plain classification step, counting its Python calls."""

    calls = 0

    def training_step(self, model, optimizer, rngs, batch):
        type(self).calls += 1
        return super().training_step(model, optimizer, rngs, batch)

    def validation_step(self, model, batch):
        return super().validation_step(model, batch)


@pytest.mark.parametrize("k", [1, 3])
def test_the_perf_columns_call_the_step_no_more_often(k):
    x, y = blobs()

    def calls(perf: bool) -> int:
        CountingTask.calls = 0
        model = MLP(p=0.0, rngs=js.Rngs(params=0))
        trainer = Trainer(2, perf_metrics=perf, steps_per_execution=k, verbose=False)
        history = trainer.fit(
            CountingTask(model, make_optimizer(model)), ArrayLoader(x, y, batch_size=16)
        )
        assert ("perf/flops_per_step" in history[-1]) is perf
        return CountingTask.calls

    assert calls(True) == calls(False) > 0


def test_the_analysis_reuses_the_calls_trace_and_compilation():
    traced = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, *_, **__: traced.append(name) if name.startswith("/jax/core/compile") else 0
    )
    task = _task()
    with js.programs_run() as ran:
        task.training_step(task.model, task.optimizer, None, _first_batch())
    before = len(traced)
    [(function, args, kwargs)] = ran
    compiled = function.lower(*args, **kwargs).compile()
    assert len(traced) == before  # no trace, no lowering, no compilation
    assert compiled.cost_analysis()["flops"] == _own_step().cost_analysis()["flops"]


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"perf_metrics": 1}, TypeError, "perf_metrics"),
        ({"peak_flops": "datasheet"}, TypeError, "peak_flops"),
        ({"peak_flops": -1.0}, ValueError, "peak_flops"),
        ({"tokens_per_sample": 0}, TypeError, "tokens_per_sample"),
        ({"perf_metrics": False, "peak_flops": 1e12}, ValueError, "perf_metrics=False"),
    ],
)
def test_bad_options_are_refused(options, error, match):
    with pytest.raises(error, match=match):
        Trainer(1, **options)


def test_measure_peak_flops_refuses_a_bad_size():
    with pytest.raises(ValueError, match="n must be"):
        measure_peak_flops(0)
