"""Trainer(compilation_cache=...): the persistent compilation cache turned on by default."""

from __future__ import annotations

import pytest
from js_train_testing import MLP, make_optimizer

import js
from js.training import ArrayLoader, Task, Trainer


def test_fit_turns_on_the_compilation_cache_in_the_directory_given(tmp_path, monkeypatch, data):
    monkeypatch.delenv("JS_COMPILATION_CACHE", raising=False)
    x, y = data
    # An architecture no other test builds: a model of a known structure would reuse the
    # program compiled earlier in this process, and nothing new would reach the cache.
    model = MLP(hidden=13, p=0.0, rngs=js.Rngs(params=0))
    task = Task(model, make_optimizer(model))
    try:
        Trainer(max_epochs=1, verbose=False, compilation_cache=tmp_path / "cache").fit(
            task, ArrayLoader(x, y, batch_size=16)
        )
    finally:
        js.disable_compilation_cache()
    assert any((tmp_path / "cache").iterdir()), "no compiled program was written to the cache"


def test_compilation_cache_false_leaves_it_off(tmp_path, monkeypatch, make_task, data):
    monkeypatch.delenv("JS_COMPILATION_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    x, y = data
    Trainer(max_epochs=1, verbose=False, compilation_cache=False).fit(
        make_task(p=0.0, dropout=False), ArrayLoader(x, y, batch_size=16)
    )
    assert not (tmp_path / "js").exists()


def test_a_bad_compilation_cache_is_refused_when_the_trainer_is_built():
    with pytest.raises(
        TypeError,
        match=r"Trainer compilation_cache must be True, False or a "
        r"directory path, got int\. Fix: compilation_cache=False",
    ):
        Trainer(max_epochs=1, compilation_cache=1)
