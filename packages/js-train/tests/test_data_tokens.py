"""js.training.data.TokenWindows: windows of a memory-mapped nanoGPT token file, through grain."""

import pickle
import subprocess
import sys

import numpy as np
import pytest

from js.training.data import TokenWindows


@pytest.fixture
def token_file(tmp_path):
    """A nanoGPT-style train.bin: 103 uint16 token ids, values up to 60000 (above int16)."""
    tokens = (np.arange(103, dtype=np.int64) * 587) % 60001
    path = tmp_path / "train.bin"
    np.array(tokens, dtype=np.uint16).tofile(path)
    return path, tokens


def test_sequential_windows_are_the_files_non_overlapping_slices(token_file):
    path, tokens = token_file
    windows = TokenWindows(path, 8)
    assert len(windows) == (103 - 1) // 8 == 12
    for i in range(len(windows)):
        x, y = windows[i]
        assert x.shape == y.shape == (8,) and x.dtype == y.dtype == np.int32
        np.testing.assert_array_equal(x, tokens[i * 8 : i * 8 + 8])
        np.testing.assert_array_equal(y, tokens[i * 8 + 1 : i * 8 + 9])
    np.testing.assert_array_equal(windows[-1][1], tokens[89:97])  # the last full window
    with pytest.raises(IndexError, match="window 12 out of range for 12"):
        windows[12]


def test_random_windows_start_at_every_offset(token_file):
    path, tokens = token_file
    windows = TokenWindows(path, 8, random=True)
    assert len(windows) == 103 - 8 == 95
    for i in (0, 1, 50, 94):
        x, y = windows[i]
        np.testing.assert_array_equal(x, tokens[i : i + 8])
        np.testing.assert_array_equal(y, tokens[i + 1 : i + 9])  # the file's last token at 94


@pytest.mark.parametrize("dtype", [np.uint32, np.int32, np.uint8])
def test_other_integer_dtypes(tmp_path, dtype):
    path = tmp_path / "tokens.bin"
    np.arange(20, dtype=dtype).tofile(path)
    x, y = TokenWindows(path, 4, dtype)[2]
    assert x.tolist() == [8, 9, 10, 11] and y.tolist() == [9, 10, 11, 12]


def test_repr_is_fixed_and_a_pickle_round_trip_reopens_the_file(token_file):
    path, _ = token_file
    windows = TokenWindows(str(path), 8, random=True)
    text = f"TokenWindows('{path}', block_size=8, dtype=uint16, random=True)"
    assert repr(windows) == text
    before = windows[7]
    assert repr(windows) == text  # opening the memory map changes nothing visible
    again = pickle.loads(pickle.dumps(windows))
    assert again._map is None and repr(again) == text  # the map never travels
    for a, b in zip(again[7], before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_files_and_arguments_are_refused_with_the_fix(tmp_path, token_file):
    path, _ = token_file
    with pytest.raises(FileNotFoundError, match="no token file at '.*missing.bin'. Fix: write"):
        TokenWindows(tmp_path / "missing.bin", 8)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\0" * 21)
    with pytest.raises(ValueError, match="holds 21 bytes, not a whole number of uint16 tokens"):
        TokenWindows(odd, 4)
    with pytest.raises(ValueError, match=r"holds 103 tokens, too few for one window of block_si"):
        TokenWindows(path, 103)
    assert len(TokenWindows(path, 102)) == 1  # 103 tokens: exactly one window of 102
    with pytest.raises(ValueError, match="block_size must be an int >= 1, got 0"):
        TokenWindows(path, 0)
    with pytest.raises(TypeError, match="block_size must be an int >= 1, got True"):
        TokenWindows(path, True)
    with pytest.raises(TypeError, match="dtype must be an integer dtype .*, got float32"):
        TokenWindows(path, 8, np.float32)
    with pytest.raises(TypeError, match="dtype 'token' is not a NumPy dtype"):
        TokenWindows(path, 8, "token")
    with pytest.raises(TypeError, match="random must be True or False, got 1"):
        TokenWindows(path, 8, random=1)


def test_through_a_grain_map_dataset_shuffled_and_batched(token_file):
    grain = pytest.importorskip("grain")
    path, tokens = token_file
    windows = TokenWindows(path, 8, random=True)
    dataset = grain.MapDataset.source(windows).shuffle(seed=3).batch(5, drop_remainder=True)
    batches = list(dataset)
    assert len(batches) == 95 // 5
    x, y = batches[0]
    assert x.shape == y.shape == (5, 8) and x.dtype == np.int32
    starts = np.concatenate([xb[:, 0] for xb, _ in batches])  # the first token names the offset
    offsets = [int(np.flatnonzero(tokens[:95] == s)[0]) for s in starts]
    assert sorted(offsets) == list(range(95))  # every offset once per epoch, in a random order
    assert offsets != list(range(95))
    for (xb, yb), first in zip(batches, range(0, 95, 5), strict=True):
        for row, offset in enumerate(offsets[first : first + 5]):
            np.testing.assert_array_equal(xb[row], tokens[offset : offset + 8])
            np.testing.assert_array_equal(yb[row], tokens[offset + 1 : offset + 9])


def loader(grain, path, workers):
    return grain.DataLoader(
        data_source=TokenWindows(path, 8),
        sampler=grain.samplers.IndexSampler(12, shuffle=True, seed=0, num_epochs=1),
        operations=[grain.transforms.Batch(4)],
        worker_count=workers,
    )


def rows(batches):
    return sorted(row for batch in batches for row in batch)


def test_a_grain_data_loader_restores_its_position_by_the_sources_repr(token_file):
    grain = pytest.importorskip("grain")
    path, _ = token_file
    iterator = iter(loader(grain, path, 0))
    next(iterator)
    state = iterator.get_state()
    rest = [x.tolist() for x, _ in iterator]
    restored = iter(loader(grain, path, 0))
    restored.set_state(state)  # grain compares the source's repr with the saved one
    assert [x.tolist() for x, _ in restored] == rest and len(rest) == 2


@pytest.mark.process
@pytest.mark.slow
def test_grain_worker_processes_read_the_same_windows(token_file):
    grain = pytest.importorskip("grain")
    import absl.flags

    absl.flags.FLAGS.mark_as_parsed()  # grain's workers read absl flags (FACTS: grain 0.2.18)
    path, _ = token_file
    alone = [x.tolist() for x, _ in loader(grain, path, 0)]
    assert rows([x.tolist() for x, _ in loader(grain, path, 1)]) == rows(alone)


@pytest.mark.slow
@pytest.mark.process
def test_grain_worker_processes_restore_mid_epoch(token_file):
    grain = pytest.importorskip("grain")
    import absl.flags

    absl.flags.FLAGS.mark_as_parsed()
    path, _ = token_file
    alone = [x.tolist() for x, _ in loader(grain, path, 0)]
    iterator = iter(loader(grain, path, 2))
    first = next(iterator)[0].tolist()
    state = iterator.get_state()
    rest = [x.tolist() for x, _ in iterator]
    assert rows([first, *rest]) == rows(alone)  # each worker batches its own rows
    restored = iter(loader(grain, path, 2))
    restored.set_state(state)
    assert [x.tolist() for x, _ in restored] == rest


@pytest.mark.process
@pytest.mark.slow
def test_importing_js_training_needs_no_grain():
    script = (
        "import sys; sys.modules['grain'] = None\n"  # grain absent: `import grain` fails
        "import numpy as np, tempfile, js.training\n"
        "from js.training.data import TokenWindows, process_batches\n"
        "path = tempfile.mkdtemp() + '/t.bin'; np.arange(9, dtype=np.uint16).tofile(path)\n"
        "print(TokenWindows(path, 4)[1][0].tolist())\n"
        "try:\n    process_batches([0, 1], 2)\n"
        "except ImportError as error:\n    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[4, 5, 6, 7]",
        "js.training.data.process_batches needs grain, js-train's optional extra. Fix: pip "
        "install 'js-train[grain]'",
    ]
