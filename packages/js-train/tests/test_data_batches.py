"""js.training.data.process_batches: every process its rows of one global, seeded batch order.

Processes are simulated by passing process_index/process_count (the rows a process reads do not
depend on anything else); the last test runs a real 2-process job through js.training.launch.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from js.training.data import TokenWindows, process_batches

grain = pytest.importorskip("grain")
JOBS = Path(__file__).parent / "jobs"  # the child-process scripts


def local_batches(data, batch, processes, epochs=1, **options):
    """[process][batch] lists of row ids, over ``epochs`` epochs."""
    out = []
    for p in range(processes):
        ds = process_batches(data, batch, process_index=p, process_count=processes, **options)
        out.append([b.tolist() for b in ds.repeat(epochs)])
    return out


def test_without_grain_process_batches_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "grain", None)  # import grain raises ImportError
    with pytest.raises(ImportError, match=r"process_batches needs grain.*'js-train\[grain\]'"):
        process_batches(list(range(8)), 4)


@pytest.mark.parametrize("processes", [1, 2, 4])
def test_processes_assemble_the_single_process_batches_in_one_order(processes):
    rows = list(range(40))
    alone = local_batches(rows, 8, 1, epochs=2, seed=7)[0]
    shares = local_batches(rows, 8, processes, epochs=2, seed=7)
    assert all(len(share) == 10 for share in shares)  # 5 batches an epoch, 2 epochs
    assembled = [sum((share[b] for share in shares), []) for b in range(10)]
    assert assembled == alone  # process p holds rows [p*B/P, (p+1)*B/P) of global batch b
    for epoch in (alone[:5], alone[5:]):
        assert sorted(sum(epoch, [])) == rows  # every row once per epoch, over all processes
    assert alone[:5] != alone[5:] and sum(alone[:5], []) != rows  # a new shuffled order
    assert alone == local_batches(rows, 8, 1, epochs=2, seed=7)[0]  # seeded: reproducible
    assert alone != local_batches(rows, 8, 1, epochs=2, seed=8)[0]


def test_without_shuffle_the_order_is_the_datas():
    assert local_batches(list(range(8)), 4, 2, shuffle=False) == [
        [[0, 1], [4, 5]],
        [[2, 3], [6, 7]],
    ]


def test_the_last_smaller_batch_is_dropped_or_split_over_the_processes():
    rows = list(range(10))
    assert local_batches(rows, 4, 2, shuffle=False) == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    kept = local_batches(rows, 4, 2, shuffle=False, drop_remainder=False)
    assert kept == [[[0, 1], [4, 5], [8]], [[2, 3], [6, 7], [9]]]
    alone = local_batches(rows, 4, 1, epochs=2, seed=1, drop_remainder=False)[0]
    shares = local_batches(rows, 4, 2, epochs=2, seed=1, drop_remainder=False)
    assert [a + b for a, b in zip(*shares, strict=True)] == alone
    assert sorted(sum(alone[:3], [])) == rows and sorted(sum(alone[3:], [])) == rows


def test_transforms_run_only_on_the_processes_own_rows():
    seen = []

    def record(row):
        seen.append(row)
        return row * 10

    dataset = grain.MapDataset.source(list(range(16))).map(record)
    batches = [
        b.tolist() for b in process_batches(dataset, 8, seed=3, process_index=1, process_count=2)
    ]
    assert sorted(seen) == sorted(row // 10 for batch in batches for row in batch)
    assert len(seen) == 8  # half the rows: those of process 1


def test_token_windows_in_batches_of_x_and_y(tmp_path):
    path = tmp_path / "train.bin"
    np.arange(200, dtype=np.uint16).tofile(path)
    windows = TokenWindows(path, 16, random=True)
    x, y = process_batches(windows, 8, seed=0, process_index=0, process_count=2)[0]
    assert x.shape == y.shape == (4, 16) and x.dtype == np.int32
    np.testing.assert_array_equal(y, x + 1)  # the tokens are their offsets here


def test_iterator_state_has_one_structure_and_restores_mid_epoch_in_every_process():
    rows = list(range(24))
    states = []
    for p in range(2):
        dataset = process_batches(rows, 4, seed=2, process_index=p, process_count=2)
        iterator = iter(dataset)
        next(iterator), next(iterator)
        states.append(iterator.get_state())
        rest = [b.tolist() for b in iterator]
        restored = iter(dataset)
        restored.set_state(states[0])  # the primary's state, saved by the lead's checkpoint
        assert [b.tolist() for b in restored] == rest and len(rest) == 4
    assert states[0] == states[1]


@pytest.mark.process
@pytest.mark.slow
def test_grain_worker_processes_give_the_same_batches():
    import absl.flags

    absl.flags.FLAGS.mark_as_parsed()  # grain's workers read absl flags (FACTS: grain 0.2.18)
    dataset = process_batches(list(range(16)), 4, seed=1, process_index=1, process_count=2)
    workers = grain.MultiprocessingOptions(num_workers=2)
    iterator = iter(dataset.repeat(2).to_iter_dataset().mp_prefetch(workers))
    try:
        got = [b.tolist() for b in iterator]
    finally:
        iterator.close()
    assert got == [b.tolist() for b in dataset.repeat(2)]


def test_bad_arguments_are_refused_with_the_fix():
    rows = list(range(10))
    with pytest.raises(ValueError, match="global_batch_size=6 does not split evenly over 4"):
        process_batches(rows, 6, process_index=0, process_count=4)
    with pytest.raises(ValueError, match=r"process_index=2 is not below process_count=2"):
        process_batches(rows, 4, process_index=2, process_count=2)
    with pytest.raises(ValueError, match="10 rows make no global batch of 16. Fix: a smaller"):
        process_batches(rows, 16, process_index=0, process_count=1)
    with pytest.raises(ValueError, match=r"holds 2 rows \(10 % 4\), which do not split evenly"):
        process_batches(rows, 4, drop_remainder=False, process_index=0, process_count=4)
    with pytest.raises(ValueError, match="seed must be below 2\\*\\*32"):
        process_batches(rows, 2, seed=2**32, process_index=0, process_count=1)
    with pytest.raises(TypeError, match="data must be a grain MapDataset or a random-access"):
        process_batches(grain.MapDataset.range(8).to_iter_dataset(), 2)
    with pytest.raises(TypeError, match="global_batch_size must be an int >= 1, got 2.0"):
        process_batches(rows, 2.0)


def start_job(*args: str, processes: int = 2) -> subprocess.Popen:
    """data_parallel_job.py: ``processes`` x 2 CPU devices through the launcher, or, with
    ``processes=1``, one process of 4 devices on its own."""
    env = {**os.environ, "JS_COMPILATION_CACHE": "0"}
    if processes == 1:
        flags = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"
        env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=flags)  # compiled as the launched ones are
        command = [sys.executable, "data_parallel_job.py", *args]
    else:
        command = [sys.executable, "-m", "js.training.launch", "--processes", str(processes)]
        command += ["--devices-per-process", "2", "data_parallel_job.py", *args]
    return subprocess.Popen(
        command, cwd=JOBS, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def report(job: subprocess.Popen) -> dict:
    output, _ = job.communicate(timeout=600)
    assert job.returncode == 0, output[-4000:]
    line = next(line for line in output.splitlines() if '{"devices"' in line)
    return json.loads(line.removeprefix("[0] "))


@pytest.mark.process
@pytest.mark.slow
def test_two_processes_train_like_one_through_the_launcher():
    """2 processes x 2 CPU devices read their own rows; Trainer(mesh=) assembles the batches."""
    two, one = (report(job) for job in [start_job(), start_job(processes=1)])
    assert two["devices"] == one["devices"] == 4 and len(one["losses"]) == 12
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.process
def test_two_processes_resume_mid_epoch_from_the_checkpointed_grain_state(tmp_path):
    """Each process restores the iterator state ModelCheckpoint saved, at step 5 of 12."""
    two = report(start_job("resume", str(tmp_path)))
    assert two["resumed"] == two["losses"][5:]  # bit for bit, in both processes' rows


@pytest.mark.slow
@pytest.mark.process
def test_grain_worker_processes_restore_mid_epoch():
    import absl.flags

    absl.flags.FLAGS.mark_as_parsed()
    dataset = process_batches(list(range(16)), 4, seed=1, process_index=0, process_count=2)
    pipeline = dataset.repeat(2).to_iter_dataset()
    workers = grain.MultiprocessingOptions(num_workers=2)
    iterator = iter(pipeline.mp_prefetch(workers))
    first = [next(iterator).tolist() for _ in range(3)]
    state = iterator.get_state()
    iterator.close()
    restored = iter(pipeline.mp_prefetch(workers))
    restored.set_state(state)
    try:
        rest = [b.tolist() for b in restored]
    finally:
        restored.close()
    assert first + rest == [b.tolist() for b in dataset.repeat(2)]
