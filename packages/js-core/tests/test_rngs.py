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


def test_load_state_dict_names_a_non_mapping_and_entries_that_are_not_arrays():
    rngs = js.Rngs(dropout=3)
    before = rngs.state_dict()
    with pytest.raises(TypeError, match=r"Rngs.load_state_dict: state_dict must be a mapping"):
        rngs.load_state_dict(list(before.items()))
    with pytest.raises(TypeError, match=r"entries that are not arrays.*\n  'dropout.count': "
                       r"list"):
        rngs.load_state_dict({**before, "dropout.count": [[1], [2, 3]]})
    np.testing.assert_array_equal(rngs.state_dict()["dropout.key"], before["dropout.key"])
    live = js.Rngs(dropout=5).state_dict(as_numpy=False)
    assert isinstance(live["dropout.key"], jax.Array)
    rngs.load_state_dict(live)
    np.testing.assert_array_equal(rngs.state_dict()["dropout.key"], live["dropout.key"])
