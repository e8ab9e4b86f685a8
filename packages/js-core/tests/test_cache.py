"""js.enable_compilation_cache: a second process loads its programs from the cache directory.

The hits and misses are read from JAX's own monitoring events (``/jax/compilation_cache/...``),
never from timings. Each run is a fresh subprocess: the cache is process-wide JAX state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import js
from js import _cache

# A small js.jit training step; prints the cache events it caused and the cache directory.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp
    from jax import monitoring
    import js

    events = {"hits": 0, "misses": 0}
    names = {"/jax/compilation_cache/cache_hits": "hits",
             "/jax/compilation_cache/cache_misses": "misses"}

    def listen(event, **_):
        if event in names:
            events[names[event]] += 1

    monitoring.register_event_listener(listen)
    paths = [a for a in sys.argv[1:] if a != "--disable"]
    directory = js.enable_compilation_cache(paths[0] if paths else None)

    class Net(js.Module):
        def __init__(self):
            super().__init__()
            self.w = js.Parameter(jnp.ones((3, 2)))

        def forward(self, x):
            return jnp.tanh(x @ self.w.value)

    @js.jit
    def step(model, x):
        loss, grads = js.value_and_grad(lambda m: jnp.sum(m(x) ** 2))(model)
        model.w.value = model.w.value - 0.1 * grads["w"]
        return loss

    model = Net()
    before = dict(events)
    loss = float(step(model, jnp.ones((4, 3))))
    step_events = {k: events[k] - before[k] for k in events}
    if "--disable" in sys.argv:
        js.disable_compilation_cache()
        before = dict(events)
        jax.jit(lambda x: x * 3.5 - 1)(jnp.ones(7)).block_until_ready()
        step_events["after_disable"] = events["hits"] + events["misses"] - sum(before.values())
    print(json.dumps({"directory": str(directory), "events": events, "step": step_events,
                      "loss": loss}))
    """
)


def _run(args, env_extra=None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JS_COMPILATION_CACHE"}
    env.update(env_extra or {})
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.process
def test_second_process_loads_the_step_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _run([str(cache)])
    assert first["directory"] == str(cache)
    assert first["step"]["misses"] >= 1 and first["step"]["hits"] == 0  # compiled and written
    assert any(cache.iterdir())  # the programs are on disk
    second = _run([str(cache)])
    assert second["step"]["hits"] >= 1 and second["step"]["misses"] == 0  # loaded, not compiled
    assert second["loss"] == first["loss"]


@pytest.mark.process
@pytest.mark.slow
def test_disable_stops_using_the_cache(tmp_path):
    got = _run([str(tmp_path / "cache"), "--disable"])
    assert got["step"]["misses"] >= 1 and got["step"]["after_disable"] == 0


@pytest.mark.process
@pytest.mark.slow
def test_default_directory_is_under_the_user_cache_dir(tmp_path):
    got = _run([], {"XDG_CACHE_HOME": str(tmp_path), "JS_COMPILATION_CACHE": "1"})
    assert got["directory"] == str(tmp_path / "js" / "jax")
    assert any((tmp_path / "js" / "jax").iterdir())


@pytest.mark.process
@pytest.mark.slow
def test_environment_switch_turns_it_off(tmp_path):
    got = _run([str(tmp_path / "cache")], {"JS_COMPILATION_CACHE": "0"})
    assert got["directory"] == "None"
    assert got["events"] == {"hits": 0, "misses": 0}
    assert not (tmp_path / "cache").exists()


def test_default_cache_dir_without_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _cache.default_cache_dir() == tmp_path / ".cache" / "js" / "jax"


def test_bad_path_type_is_refused():
    with pytest.raises(TypeError, match=r"path must be a str or os.PathLike, got int 3"):
        js.enable_compilation_cache(3)


def test_path_that_is_a_file_is_refused(tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(ValueError, match=r"exists and is not a directory"):
        js.enable_compilation_cache(file)


def test_bad_switch_value_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("JS_COMPILATION_CACHE", "maybe")
    with pytest.raises(ValueError, match=r"JS_COMPILATION_CACHE='maybe' is not a switch"):
        js.enable_compilation_cache(tmp_path)
    assert not any(tmp_path.iterdir())  # refused before anything was created
