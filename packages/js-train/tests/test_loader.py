import numpy as np
import pytest

from js.training import ArrayLoader


def test_batches_cover_every_example_in_order():
    x, y = np.arange(10), np.arange(10) * 2
    batches = list(ArrayLoader(x, y, batch_size=4))
    assert [b[0].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert all((b[1] == b[0] * 2).all() for b in batches)
    assert len(ArrayLoader(x, batch_size=4)) == 3


def test_drop_last_drops_the_short_batch():
    loader = ArrayLoader(np.arange(10), batch_size=4, drop_last=True)
    assert len(loader) == 2
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_shuffle_is_a_permutation_that_changes_per_epoch():
    loader = ArrayLoader(np.arange(20), batch_size=20, shuffle=True, seed=3)
    first, second = next(iter(loader))[0], next(iter(loader))[0]
    assert sorted(first.tolist()) == list(range(20))
    assert first.tolist() != second.tolist()


def test_shuffle_depends_only_on_seed_and_epoch():
    a = ArrayLoader(np.arange(20), batch_size=5, shuffle=True, seed=1)
    orders = [np.concatenate([b[0] for b in a]) for _ in range(3)]
    b = ArrayLoader(np.arange(20), batch_size=5, shuffle=True, seed=1)
    b.set_epoch(2)  # resume at epoch 2: same order as the uninterrupted loader's third epoch
    assert np.concatenate([batch[0] for batch in b]).tolist() == orders[2].tolist()
    c = ArrayLoader(np.arange(20), batch_size=5, shuffle=True, seed=2)
    assert np.concatenate([batch[0] for batch in c]).tolist() != orders[0].tolist()


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((), {"batch_size": 2}, "at least one array"),
        ((np.zeros(3), np.zeros(4)), {"batch_size": 2}, r"first dimension.*\[3\], \[4\]"),
        ((np.float32(1.0),), {"batch_size": 2}, "share their first dimension"),
        ((np.zeros(3),), {"batch_size": 0}, "batch_size must be an int >= 1, got 0"),
        ((np.zeros(3),), {"batch_size": 1, "seed": -1}, "seed must be an int >= 0, got -1"),
        ((np.zeros(3),), {"batch_size": 4, "drop_last": True}, "yields no batch"),
    ],
)
def test_bad_arguments_fail_when_built(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ArrayLoader(*args, **kwargs)


def test_numpy_integer_batch_sizes_work_and_bools_are_refused():
    loader = ArrayLoader(np.arange(5), batch_size=np.int64(2), seed=np.int32(1), shuffle=True)
    assert loader.batch_size == 2 and len(loader) == 3 and len(list(loader)) == 3
    with pytest.raises(TypeError, match=r"batch_size must be an int >= 1, got True \(a bool\)"):
        ArrayLoader(np.arange(5), batch_size=True)
    with pytest.raises(TypeError, match=r"batch_size must be an int >= 1, got 2\.0 \(a float\)"):
        ArrayLoader(np.arange(5), batch_size=2.0)
