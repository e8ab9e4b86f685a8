"""A persistent compilation cache: XLA programs saved on disk, reused by the next process.

JAX can write every compiled program to a directory and, in a later process, load it instead
of compiling again (``jax_compilation_cache_dir``). By default it only keeps programs that took
over a second to compile, which on a CPU is none of a small model's: a training step compiles
in 0.3-1.5 s, and building a model compiles one tiny program per eager initializer op. So
:func:`enable_compilation_cache` also lowers both of JAX's thresholds (compile time and entry
size) to zero: every program is cached, and a second run of the same script starts from disk.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache as _jax_cache

ENV_SWITCH = "JS_COMPILATION_CACHE"  # "0"/"off"/"false"/"no" turns the cache off
_OFF, _ON = ("0", "off", "false", "no"), ("", "1", "on", "true", "yes")


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/js/jax``, or ``~/.cache/js/jax`` when ``XDG_CACHE_HOME`` is unset."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "js" / "jax"


def _switched_on() -> bool:
    value = os.environ.get(ENV_SWITCH, "").strip().lower()
    if value not in _OFF + _ON:
        raise ValueError(
            f"{ENV_SWITCH}={os.environ[ENV_SWITCH]!r} is not a switch: expected one of "
            f"{', '.join(repr(v) for v in _OFF + _ON[1:])}. Fix: set it to 0 to turn the "
            "compilation cache off, or unset it"
        )
    return value in _ON


def _cache_dir(path) -> Path:
    if path is None:
        return default_cache_dir()
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"enable_compilation_cache: path must be a str or os.PathLike, got "
            f"{type(path).__name__} {path!r}. Fix: pass a directory, or None for the default"
        )
    directory = Path(path).expanduser()
    if directory.exists() and not directory.is_dir():
        raise ValueError(
            f"enable_compilation_cache: {str(directory)!r} exists and is not a directory. "
            "Fix: pass a directory (it is created if missing)"
        )
    return directory


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path | None:
    """Save every compiled XLA program under ``path`` and reuse it in later processes.

    Sets JAX's ``jax_compilation_cache_dir`` to ``path`` (created if missing; default
    :func:`default_cache_dir`, i.e. ``$XDG_CACHE_HOME/js/jax`` or ``~/.cache/js/jax``) and
    lowers ``jax_persistent_cache_min_compile_time_secs`` to 0 and
    ``jax_persistent_cache_min_entry_size_bytes`` to -1 (no minimum), so that the small programs
    of a CPU run are cached too. A later process that compiles the same program (same
    computation, shapes, jax version and device) loads it from disk. Call it once, early (before
    the first compilation you want cached); calling it again with another path moves the cache.

    The environment variable ``JS_COMPILATION_CACHE=0`` (or ``off``/``false``/``no``) turns
    this call into a no-op that returns None: the switch for scripts and CI that call it
    unconditionally. The cache is trusted code: do not point it at a directory others can write.

    Args:
        path: the cache directory, or None for the default.

    Returns:
        The cache directory, or None when ``JS_COMPILATION_CACHE`` turned it off.

    Example:
        >>> import tempfile, js
        >>> directory = js.enable_compilation_cache(tempfile.mkdtemp())
        >>> directory.is_dir()
        True
        >>> js.disable_compilation_cache()  # back to compiling every program in-process
    """
    directory = _cache_dir(path)  # every check before any state changes
    if not _switched_on():
        return None
    directory.mkdir(parents=True, exist_ok=True)
    # jax.config sets its flags as attributes at run time; its stubs do not list them
    previous = jax.config.jax_compilation_cache_dir  # pyright: ignore[reportAttributeAccessIssue]
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    if previous is not None and previous != str(directory):
        # JAX opens its cache once per process: forget the old directory so the next
        # compilation opens the new one.
        _jax_cache.reset_cache()
    return directory


def disable_compilation_cache() -> None:
    """Stop reading and writing the persistent cache in this process (files stay on disk).

    Example:
        >>> import js
        >>> js.disable_compilation_cache()
    """
    jax.config.update("jax_compilation_cache_dir", None)
    _jax_cache.reset_cache()
