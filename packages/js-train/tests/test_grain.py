"""grain pipelines in Trainer.fit: MapDataset, IterDataset (worker processes included) and
DataLoader train to the losses of the same rows through an ArrayLoader, and a mid-epoch
checkpoint of grain's own iterator state resumes bit for bit. Worker processes take seconds to
start: only the tests named ``workers`` start them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from js_train_testing import RowSource, blobs, scale_row

from js.training import ArrayLoader, ModelCheckpoint, Trainer, load_checkpoint, save_checkpoint

grain = pytest.importorskip("grain")

BATCH = 16  # 96 rows: 6 batches an epoch


def _order(x, y) -> np.ndarray:
    """The row order of ``_map_dataset``'s shuffle (the same pipeline over row numbers)."""
    index = grain.MapDataset.source(RowSource(np.arange(len(x)), y)).shuffle(seed=0)
    return np.array([int(row[0]) for row in index])


def _map_dataset(x, y):
    return grain.MapDataset.source(RowSource(x, y)).shuffle(seed=0).map(scale_row).batch(BATCH)


def _reference(x, y) -> ArrayLoader:
    """The rows of ``_map_dataset``, transformed, in its order, through an ArrayLoader."""
    order = _order(x, y)
    rows = scale_row((x[order], y[order]))
    return ArrayLoader(*rows, batch_size=BATCH)


def _data_loader(x, y, worker_count=0):
    """A grain DataLoader of ``BATCH``-row batches, once over the rows in a seeded order."""
    sampler = grain.samplers.IndexSampler(len(x), num_epochs=1, shuffle=True, seed=0)
    operations = [grain.transforms.Batch(BATCH, drop_remainder=True)]
    return grain.DataLoader(
        data_source=RowSource(x, y),
        sampler=sampler,
        operations=operations,
        worker_count=worker_count,
    )


def _losses(history) -> list:
    return [(h["step"], h.get("train/loss"), h.get("train/loss_epoch")) for h in history]


def _params(task) -> dict:
    return {key: np.asarray(value) for key, value in task.model.state_dict().items()}


@pytest.mark.process
@pytest.mark.slow
def test_importing_js_training_does_not_import_grain():
    code = "import sys, js.training; print('grain' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_map_and_iter_datasets_train_like_the_same_rows_in_an_array_loader(make_task):
    x, y = blobs()
    expected = Trainer(2, log_every_n_steps=2, verbose=False).fit(make_task(), _reference(x, y))
    dataset = _map_dataset(x, y)
    for data in (dataset, dataset.to_iter_dataset()):
        for prefetch in (0, 2):
            trainer = Trainer(2, log_every_n_steps=2, verbose=False, prefetch=prefetch)
            history = trainer.fit(make_task(), data)
            assert _losses(history) == _losses(expected), (type(data).__name__, prefetch)


def test_mid_epoch_resume_of_a_map_dataset_is_bit_for_bit(tmp_path, make_task):
    x, y = blobs()
    straight = make_task()
    expected = Trainer(2, log_every_n_steps=1, verbose=False).fit(straight, _map_dataset(x, y))

    checkpoint = ModelCheckpoint(tmp_path, "train/loss", every_n_steps=4)
    first = Trainer(2, callbacks=[checkpoint], max_steps=9, log_every_n_steps=1, verbose=False)
    first.fit(make_task(), _map_dataset(x, y))
    assert checkpoint.last_step == 8  # epoch 1, its third batch

    task, dataset, trainer = (
        make_task(seed=7),
        _map_dataset(x, y),
        Trainer(2, log_every_n_steps=1, verbose=False),
    )
    objects = {**task.checkpoint_objects(), "trainer": trainer}
    load_checkpoint(tmp_path, {**objects, "loader": trainer.loader_position(dataset)}, "last")
    history = trainer.fit(task, dataset, resume=True)
    assert _losses(history) == _losses(expected[8:])
    for key, value in _params(straight).items():
        np.testing.assert_array_equal(_params(task)[key], value, err_msg=key)


def test_a_wrong_or_missing_loader_position_is_refused_before_anything_loads(tmp_path, make_task):
    x, y = blobs()
    checkpoint = ModelCheckpoint(tmp_path, "train/loss", every_n_steps=2)
    Trainer(1, callbacks=[checkpoint], max_steps=3, verbose=False).fit(
        make_task(), _map_dataset(x, y).to_iter_dataset()
    )
    task, trainer = make_task(seed=7), Trainer(1, verbose=False)
    before = _params(task)
    objects = {**task.checkpoint_objects(), "trainer": trainer}
    mixed = grain.IterDataset.mix([_map_dataset(x, y).to_iter_dataset()] * 2, [0.5, 0.5])
    with pytest.raises(ValueError, match=r"'loader': the saved grain iterator state has the"):
        load_checkpoint(tmp_path, {**objects, "loader": trainer.loader_position(mixed)})
    with pytest.raises(ValueError, match=r"holds a grain IterDataset position, but the loader"):
        load_checkpoint(
            tmp_path, {**objects, "loader": trainer.loader_position(_map_dataset(x, y))}
        )
    with pytest.raises(ValueError, match=r"'loader': expected a state, the checkpoint holds a j"):
        load_checkpoint(tmp_path, {**objects, "loader": _reference(x, y)})
    for key, value in before.items():  # nothing was restored
        np.testing.assert_array_equal(_params(task)[key], value, err_msg=key)
    assert trainer.global_step == 0

    load_checkpoint(tmp_path, objects)  # the trainer without the loader's position
    with pytest.raises(ValueError, match=r"no position of train_data \(a grain IterDataset\)"):
        trainer.fit(task, _map_dataset(x, y).to_iter_dataset(), resume=True)
    with pytest.raises(TypeError, match=r"a list has no position to save or restore"):
        trainer.loader_position([(x, y)])


def test_a_data_loader_itself_is_saved_and_restored_as_the_loader_entry(tmp_path, make_task):
    """save_checkpoint and load_checkpoint take the DataLoader (not loader_position) beside
    the trainer: the resumed fit goes on at the batch an uninterrupted run trains next."""
    x, y = blobs()
    # no perf columns: their analysis compiles the step once more in every fit (most of this
    # test's time), and nothing here reads them
    quiet = {"verbose": False, "perf_metrics": False}
    straight = make_task()
    expected = Trainer(1, log_every_n_steps=1, **quiet).fit(straight, _data_loader(x, y))

    task, data, first = make_task(), _data_loader(x, y), Trainer(1, max_steps=4, **quiet)
    first.fit(task, data)
    save_checkpoint(tmp_path, {**task.checkpoint_objects(), "trainer": first, "loader": data})

    task, data, trainer = (
        make_task(seed=7),
        _data_loader(x, y),
        Trainer(1, log_every_n_steps=1, **quiet),
    )
    objects = {**task.checkpoint_objects(), "trainer": trainer, "loader": data}
    restored = load_checkpoint(tmp_path, objects, "last")
    assert restored["loader"] is data and restored["step"] == 0
    history = trainer.fit(task, data, resume=True)
    assert history[0]["step"] == 5  # the fifth batch of six, as in the uninterrupted run
    assert _losses(history) == _losses(expected[4:])
    for key, value in _params(straight).items():
        np.testing.assert_array_equal(_params(task)[key], value, err_msg=key)


def test_a_pipeline_entry_without_its_trainer_or_position_is_refused_with_the_fix(
    tmp_path, make_task
):
    x, y = blobs()
    task, data = make_task(), _data_loader(x, y)
    objects = {**task.checkpoint_objects(), "loader": data}
    fix = r"Fix: name that Trainer with it, \{..., 'trainer': trainer, 'loader': train_data\}"
    for call in (save_checkpoint, load_checkpoint):
        with pytest.raises(
            TypeError, match=r"'loader' is a grain DataLoader, whose position .*" + fix
        ):
            call(tmp_path, objects)
    with pytest.raises(TypeError, match=r"the objects hold 2 Trainers \(\['a', 'b'\]\)"):
        load_checkpoint(tmp_path, {**objects, "a": Trainer(1), "b": Trainer(1)})
    with pytest.raises(ValueError, match=r"'loader', a grain DataLoader, has no position to save"):
        save_checkpoint(tmp_path, {**objects, "trainer": Trainer(1, verbose=False)})
    assert not tmp_path.joinpath("0").exists()  # nothing was written


@pytest.mark.process
def test_workers_train_like_an_array_loader_and_resume_bit_for_bit(tmp_path, make_task):
    """2 worker processes (mp_prefetch) and a per-row transform: the losses of the same rows
    in an ArrayLoader; interrupted mid-epoch, restored in fresh objects, bit for bit."""
    x, y = blobs()
    straight = make_task()
    expected = Trainer(1, log_every_n_steps=1, verbose=False).fit(straight, _reference(x, y))

    def pipeline():
        options = grain.MultiprocessingOptions(num_workers=2)
        return _map_dataset(x, y).to_iter_dataset().mp_prefetch(options)

    checkpoint = ModelCheckpoint(tmp_path, "train/loss", every_n_steps=2)
    first = Trainer(1, callbacks=[checkpoint], max_steps=5, log_every_n_steps=1, verbose=False)
    history = first.fit(make_task(), pipeline())
    assert [row[:2] for row in _losses(history)] == [row[:2] for row in _losses(expected)[:5]]
    assert checkpoint.last_step == 4

    task, dataset, trainer = (
        make_task(seed=7),
        pipeline(),
        Trainer(1, log_every_n_steps=1, verbose=False),
    )
    objects = {**task.checkpoint_objects(), "trainer": trainer}
    load_checkpoint(tmp_path, {**objects, "loader": trainer.loader_position(dataset)}, "last")
    history = trainer.fit(task, dataset, resume=True)
    assert _losses(history) == _losses(expected[4:])
    for key, value in _params(straight).items():
        np.testing.assert_array_equal(_params(task)[key], value, err_msg=key)


@pytest.mark.slow
@pytest.mark.process
def test_workers_of_a_data_loader_resume_bit_for_bit(tmp_path, make_task):
    """grain.DataLoader(worker_count=2): its JSON state round-trips through the checkpoint."""
    x, y = blobs()

    def loader():
        return _data_loader(x, y, worker_count=2)

    straight = make_task()
    expected = Trainer(1, log_every_n_steps=1, verbose=False).fit(straight, loader())
    checkpoint = ModelCheckpoint(tmp_path, "train/loss", every_n_steps=3)
    Trainer(1, callbacks=[checkpoint], max_steps=4, verbose=False).fit(make_task(), loader())
    task, data, trainer = (
        make_task(seed=7),
        loader(),
        Trainer(1, log_every_n_steps=1, verbose=False),
    )
    objects = {**task.checkpoint_objects(), "trainer": trainer}
    load_checkpoint(tmp_path, {**objects, "loader": trainer.loader_position(data)}, "last")
    history = trainer.fit(task, data, resume=True)
    assert _losses(history) == _losses(expected[3:])
    for key, value in _params(straight).items():
        np.testing.assert_array_equal(_params(task)[key], value, err_msg=key)
