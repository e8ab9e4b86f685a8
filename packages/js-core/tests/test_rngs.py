import jax
import numpy as np
import pytest

import js


def test_next_advances_a_named_stream():
    rngs = js.Rngs(params=0, dropout=1)
    first, second = rngs.next("dropout"), rngs.next("dropout")
    assert not np.array_equal(jax.random.key_data(first), jax.random.key_data(second))
    assert int(rngs.dropout.count[...]) == 2 and int(rngs.params.count[...]) == 0
    assert rngs.streams() == ["params", "dropout"]


def test_missing_stream_lists_the_streams_there_are():
    rngs = js.Rngs(params=0)
    with pytest.raises(KeyError, match=r"no stream 'dropout'; its streams are \['params'\]"):
        rngs.next("dropout")


def test_state_dict_replays_a_stream_exactly():
    rngs = js.Rngs(dropout=3)
    rngs.next("dropout")
    saved = rngs.state_dict()
    assert sorted(saved) == ["dropout.count", "dropout.key"]
    expected = jax.random.key_data(rngs.next("dropout"))
    fresh = js.Rngs(dropout=99)
    fresh.load_state_dict(saved)
    np.testing.assert_array_equal(jax.random.key_data(fresh.next("dropout")), expected)


def test_load_state_dict_is_strict_and_all_or_nothing():
    rngs = js.Rngs(dropout=3)
    before = rngs.state_dict()
    with pytest.raises(ValueError, match=r"nothing was loaded. missing: \['dropout.count'\]"):
        rngs.load_state_dict({"dropout.key": before["dropout.key"]})
    with pytest.raises(ValueError, match="mismatched"):
        rngs.load_state_dict({**before, "dropout.count": np.zeros(2, np.uint32)})
    np.testing.assert_array_equal(rngs.state_dict()["dropout.count"], before["dropout.count"])


def test_random_is_jax_random():
    assert js.random is jax.random


@pytest.mark.parametrize("seed", [0, 1, 42, 2**31 - 1])
def test_host_keys_equal_jax_key_and_fold_in(seed):
    # Rngs builds keys and advances streams on the host outside compiled code; the keys must be
    # exactly those of jax.random.key and jax.random.fold_in (what flax's stream computes).
    rngs = js.Rngs(params=seed)
    reference = jax.random.key(seed)
    np.testing.assert_array_equal(
        jax.random.key_data(rngs.params.key.get_raw_value()), jax.random.key_data(reference)
    )
    for count in range(3):
        expected = jax.random.key_data(jax.random.fold_in(reference, count))
        np.testing.assert_array_equal(jax.random.key_data(rngs.next("params")), expected)
    assert int(rngs.params.count[...]) == 3


def test_host_threefry_matches_jax_on_many_inputs():
    from js._rngs import threefry2x32

    counts = np.arange(0, 2**32 - 2**26, 2**32 // 97, dtype=np.uint32)  # 97 counts, vectorized
    k1, k2 = 0x12345678, 0x9ABCDEF0
    key = jax.random.wrap_key_data(np.array([k1, k2], np.uint32))
    want = jax.vmap(lambda c: jax.random.key_data(jax.random.fold_in(key, c)))(counts)
    got = np.stack(threefry2x32(k1, k2, np.zeros_like(counts), counts), axis=1)
    np.testing.assert_array_equal(got, want)


def test_next_under_jit_takes_the_device_path_and_agrees():
    eager, traced = js.Rngs(dropout=5), js.Rngs(dropout=5)
    first = jax.random.key_data(eager.next("dropout"))
    step = js.jit(lambda rngs: jax.random.key_data(rngs.next("dropout")))
    np.testing.assert_array_equal(step(traced), first)
    np.testing.assert_array_equal(step(traced), jax.random.key_data(eager.next("dropout")))
    assert int(traced.dropout.count[...]) == 2


def test_seeds_outside_the_host_range_keep_jax_keys():
    rngs = js.Rngs(params=-3)
    np.testing.assert_array_equal(
        jax.random.key_data(rngs.params.key.get_raw_value()),
        jax.random.key_data(jax.random.key(-3)),
    )


def test_streams_keep_flax_semantics_for_keys_defaults_and_splits():
    rngs = js.Rngs(7, params=jax.random.key(3), dropout=1)
    assert rngs.streams() == ["params", "dropout", "default"]
    np.testing.assert_array_equal(
        jax.random.key_data(rngs.params.key.get_raw_value()),
        jax.random.key_data(jax.random.key(3)),
    )
    split = rngs.dropout.split(4)  # flax builds type(stream)(keys, tag=...)
    assert split.key.get_raw_value().shape == (4,)
    copy = js.Rngs(params=rngs.dropout)
    np.testing.assert_array_equal(
        jax.random.key_data(copy.params.key.get_raw_value()),
        jax.random.key_data(jax.random.key(1)),
    )


def test_a_counter_at_its_limit_wraps_as_jax():
    rngs = js.Rngs(params=0)
    rngs.params.count.set_value(jax.numpy.asarray(2**32 - 1, jax.numpy.uint32))
    expected = jax.random.fold_in(jax.random.key(0), 2**32 - 1)
    np.testing.assert_array_equal(
        jax.random.key_data(rngs.next("params")), jax.random.key_data(expected)
    )
    assert int(rngs.params.count[...]) == 0


def test_load_state_dict_names_a_non_mapping_and_entries_that_are_not_arrays():
    rngs = js.Rngs(dropout=3)
    before = rngs.state_dict()
    with pytest.raises(TypeError, match=r"Rngs.load_state_dict: state_dict must be a mapping"):
        rngs.load_state_dict(list(before.items()))
    with pytest.raises(
        TypeError,
        match=r"entries that are not arrays.*\n  'dropout.count': "
        r"list",
    ):
        rngs.load_state_dict({**before, "dropout.count": [[1], [2, 3]]})
    np.testing.assert_array_equal(rngs.state_dict()["dropout.key"], before["dropout.key"])
    live = js.Rngs(dropout=5).state_dict(as_numpy=False)
    assert isinstance(live["dropout.key"], jax.Array)
    rngs.load_state_dict(live)
    np.testing.assert_array_equal(rngs.state_dict()["dropout.key"], live["dropout.key"])
