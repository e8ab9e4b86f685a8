"""Rotary position embeddings as the hub's decoder configs describe them.

A config's rotary settings are normalised to transformers 5's ``rope_parameters``
(``{"rope_type": ..., "rope_theta": ..., ...}``) by :func:`standard_rope_parameters`, from that
key or from the hub's older ``rope_theta`` + ``rope_scaling``. :func:`rope_cos_sin` computes
the cosines and sines of one layer kind's positions, as transformers'
``ROPE_INIT_FUNCTIONS`` and ``dynamic_rope_update`` do (modeling_rope_utils.py): the inverse
frequencies are float32 and computed from the config at every call (transformers keeps them in
a non-persistent buffer: they are in no weight file, and casting the model cannot round them).
The tables that depend on the config alone are NumPy float32 arrays computed on the host, in
transformers' order of operations: a compiled program holds them as constants (XLA would fold
the same operations with other roundings).

The rope types (``rope_type``):

- ``default``: ``1 / theta ** (2i / dim)``.
- ``linear``: the default frequencies divided by ``factor``.
- ``llama3``: Llama 3.1's smooth per-frequency scaling.
- ``dynamic`` (dynamic NTK): past ``max_position_embeddings``, ``theta`` grows with the
  sequence, ``seq_len = max(position_ids) + 1`` of the call. transformers' module keeps the
  largest length seen so far (and resets below ``max_position_embeddings``); here each call
  computes from its own positions, which is the same while a sequence grows (generation).
- ``yarn``: frequencies blended between interpolated (``/ factor``) and original by a ramp
  over ``beta_fast``..``beta_slow`` rotations, and cos/sin scaled by ``attention_factor``
  (from the config, or from ``factor``, ``mscale`` and ``mscale_all_dim``).
- ``longrope`` (Phi-3): ``short_factor`` while ``max(position_ids) + 1`` is at most
  ``original_max_position_embeddings``, ``long_factor`` past it (per call), and cos/sin scaled
  by ``attention_factor`` (from the config, or ``sqrt(1 + log(f) / log(original))`` with
  ``f = factor`` or ``max_position_embeddings / original_max_position_embeddings``).

Types that depend on the call's positions choose with ``jnp.where`` on traced values: one
compiled program serves every length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from js.nn import functional as F

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")
# the keys each rope type reads from rope_parameters (checked when a model is built)
_REQUIRED = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("original_max_position_embeddings",),  # factor: else the contexts' ratio
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


def standard_rope_parameters(values: dict[str, Any]) -> dict[str, Any]:
    """transformers 5's ``rope_parameters`` from a config's keys: ``rope_scaling`` (hub files)
    or ``rope_parameters``, with ``rope_theta`` (default 10000) and ``rope_type`` (from the old
    ``type`` key, default "default") filled in; ``rope_scaling``/``rope_theta`` are removed.
    Types with an original context (llama3, yarn, longrope) get
    ``original_max_position_embeddings``: a top-level key of that name wins (Phi-3 keeps it
    there), else the one in the rotary settings, else ``max_position_embeddings``."""
    scaling = values.pop("rope_scaling", None)
    theta = values.pop("rope_theta", None)
    rope = dict(scaling or values.get("rope_parameters") or {})
    rope.setdefault("rope_theta", 10000.0 if theta is None else theta)
    rope.setdefault("rope_type", rope.get("type", "default"))
    if rope["rope_type"] in ("llama3", "yarn", "longrope"):
        if values.get("original_max_position_embeddings") is not None:
            rope["original_max_position_embeddings"] = values["original_max_position_embeddings"]
        rope.setdefault("original_max_position_embeddings", values.get("max_position_embeddings"))
    return rope


def fold_rope_keys(
    kwargs: dict[str, Any], *, keep: bool = False, **keys: tuple[str, Any]
) -> dict[str, Any]:
    """A config's ``kwargs`` with the family's own rotary keys folded into ``rope_parameters``,
    as transformers 5 reads them: each ``key=(own key, default)`` is taken from ``rope_scaling``
    (or ``rope_parameters``) first, then from the config's own key, then the default. The own
    keys leave ``kwargs`` unless ``keep``; ``standard_rope_parameters`` completes the rest.

    Example:
        >>> fold_rope_keys({"rotary_pct": 0.5}, partial_rotary_factor=("rotary_pct", 0.25))
        {'rope_parameters': {'partial_rotary_factor': 0.5}}
    """
    kwargs = dict(kwargs)
    rope = dict(kwargs.pop("rope_scaling", None) or kwargs.get("rope_parameters") or {})
    for key, (own, default) in keys.items():
        rope.setdefault(key, kwargs.get(own, default) if keep else kwargs.pop(own, default))
    return {**kwargs, "rope_parameters": rope}


def check_rope(owner: str, rope: Mapping[str, Any]) -> None:
    """A ValueError naming the rope type when it is not one js.models computes (raised when a
    model is built, before any weight is read)."""
    kind = rope.get("rope_type")
    if kind not in SUPPORTED_ROPE_TYPES:
        raise NotImplementedError(
            f"{owner}: rope_type {kind!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_ROPE_TYPES)}. Fix: use a model with one of those"
        )
    for key in _REQUIRED.get(kind, ()):
        _key(owner, rope, key)


def _key(owner: str, rope: Mapping[str, Any], key: str) -> Any:
    if rope.get(key) is None:
        raise KeyError(
            f"{owner}: rope_type {rope['rope_type']!r} needs {key!r} in rope_parameters (or "
            f"rope_scaling), got {dict(rope)}. Fix: add it to config.json"
        )
    return rope[key]


def _f32(x: Any) -> Any:
    return np.float32(x)


def _inv_freq(dim: int, theta: float) -> np.ndarray:
    """``F.rope_inv_freq`` (float32, computed on the host) as a NumPy array."""
    return np.asarray(F.rope_inv_freq(dim, theta))


# The tables below repeat transformers' float32 operations in its order, on the host. A
# number over a tensor is ``reciprocal(tensor) * number`` in torch (Tensor.__rtruediv__).


def _llama3(owner: str, rope: Mapping[str, Any], inv_freq: np.ndarray) -> np.ndarray:
    """Llama 3.1's frequency scaling: long wavelengths divided by ``factor``, short ones kept,
    the ones between interpolated smoothly (transformers' ``_compute_llama3_parameters``)."""
    factor = _f32(_key(owner, rope, "factor"))
    low, high = _key(owner, rope, "low_freq_factor"), _key(owner, rope, "high_freq_factor")
    old_context = _key(owner, rope, "original_max_position_embeddings")
    low_wavelen, high_wavelen = _f32(old_context / low), _f32(old_context / high)
    wavelen = (_f32(1.0) / inv_freq) * _f32(2 * math.pi)
    scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = ((_f32(1.0) / wavelen) * _f32(old_context) - _f32(low)) / _f32(high - low)
    smoothed = (_f32(1.0) - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled)


def _context(owner: str, kind: str, max_position_embeddings: int | None) -> int:
    if max_position_embeddings is None:
        raise KeyError(
            f"{owner}: rope_type {kind!r} needs max_position_embeddings in the config. Fix: "
            "add it to config.json"
        )
    return max_position_embeddings


def _dynamic(
    owner: str, rope: Mapping[str, Any], dim: int, seq_len: jax.Array, context: int
) -> jax.Array:
    """Dynamic NTK (``_compute_dynamic_ntk_parameters``): up to ``context`` positions, the
    frequencies of ``theta * ((factor * context / context) - (factor - 1)) ** (dim / (dim -
    2))`` (Python floats, as at transformers' init); past it, ``theta`` grows with the traced
    ``seq_len`` (float32, as transformers' update computes it from a tensor)."""
    factor, theta = float(_key(owner, rope, "factor")), float(rope["rope_theta"])
    power = dim / (dim - 2)
    at_init = _inv_freq(dim, theta * ((factor * context / context) - (factor - 1)) ** power)
    grown = _f32(factor) * seq_len.astype(jnp.float32) / _f32(context) - _f32(factor - 1)
    base = _f32(theta) * grown ** _f32(power)
    exponents = np.arange(0, dim, 2, dtype=np.float32) / _f32(dim)
    return jnp.where(seq_len > context, 1.0 / (base**exponents), at_init)


def _yarn(
    owner: str, rope: Mapping[str, Any], dim: int, context: int | None
) -> tuple[np.ndarray, float]:
    """YaRN's frequencies and cos/sin factor (``_compute_yarn_parameters``)."""
    theta = float(rope["rope_theta"])
    factor = rope.get("factor")
    original = _key(owner, rope, "original_max_position_embeddings")
    if factor is None:  # DeepSeek-V3: the ratio of the two contexts
        factor = _context(owner, "yarn", context) / original

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = rope.get("attention_factor")
    if attention is None:
        m, m_all = rope.get("mscale"), rope.get("mscale_all_dim")
        attention = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    beta_fast, beta_slow = rope.get("beta_fast") or 32, rope.get("beta_slow") or 1

    def correction(rotations: float) -> float:  # the dimension of ``rotations`` turns
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction(beta_fast), correction(beta_slow)
    if rope.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = (np.arange(dim // 2, dtype=np.float32) - _f32(low)) / _f32(high - low)
    extrapolation = _f32(1.0) - np.clip(ramp, _f32(0), _f32(1))
    pos_freqs = _f32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / _f32(dim))
    interpolated = _f32(1.0) / (_f32(factor) * pos_freqs)
    inv_freq = interpolated * (_f32(1.0) - extrapolation) + (_f32(1.0) / pos_freqs) * extrapolation
    return inv_freq, float(attention)


def _longrope(
    owner: str, rope: Mapping[str, Any], dim: int, seq_len: jax.Array, context: int | None
) -> tuple[jax.Array, float]:
    """LongRoPE's frequencies (short or long factors by ``seq_len``) and cos/sin factor
    (``_compute_longrope_parameters`` with ``dynamic_rope_update``'s choice)."""
    original = _key(owner, rope, "original_max_position_embeddings")
    factor = rope.get("factor")
    if factor is None:  # Phi-3: the ratio of the two contexts
        factor = _context(owner, "longrope", context) / original
    attention = rope.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    pos_freqs = _f32(rope["rope_theta"]) ** (np.arange(0, dim, 2, dtype=np.float32) / _f32(dim))
    tables = []
    for key in ("short_factor", "long_factor"):
        factors = np.asarray(_key(owner, rope, key), np.float32)
        if factors.shape != (dim // 2,):
            raise ValueError(
                f"{owner}: rope_parameters[{key!r}] must hold {dim // 2} numbers (half the "
                f"rotary dimension {dim}), got {factors.size}"
            )
        tables.append(_f32(1.0) / (factors * pos_freqs))
    return jnp.where(seq_len > original, tables[1], tables[0]), float(attention)


def rope_cos_sin(
    owner: str,
    rope: Mapping[str, Any],
    dim: int,
    position_ids: jax.Array,
    dtype: Any,
    *,
    max_position_embeddings: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``(cos, sin)`` ``[B, L, dim]`` for ``position_ids`` ``[B, L]`` (HF's duplicated-half
    layout) under ``rope`` (a ``rope_parameters`` dict), rotating ``dim`` features of a head
    (the head dim, or its rotary part with a ``partial_rotary_factor``).
    ``max_position_embeddings`` (the config's) is read by ``dynamic``, and by ``yarn`` and
    ``longrope`` without a ``factor``. ``rope`` was checked (``check_rope``) when the model
    was built."""
    kind = rope["rope_type"]
    scaling = 1.0
    seq_len = jnp.max(position_ids) + 1  # the call's length, as dynamic_rope_update's
    inv_freq: jax.Array | np.ndarray
    if kind == "dynamic":
        context = _context(owner, kind, max_position_embeddings)
        inv_freq = _dynamic(owner, rope, dim, seq_len, context)
    elif kind == "yarn":
        inv_freq, scaling = _yarn(owner, rope, dim, max_position_embeddings)
    elif kind == "longrope":
        inv_freq, scaling = _longrope(owner, rope, dim, seq_len, max_position_embeddings)
    else:
        inv_freq = _inv_freq(dim, float(rope["rope_theta"]))
        if kind == "linear":
            inv_freq = inv_freq / _f32(_key(owner, rope, "factor"))
        elif kind == "llama3":
            inv_freq = _llama3(owner, rope, inv_freq)
    return F.rotary_cos_sin(position_ids, inv_freq, attention_scaling=scaling, dtype=dtype)
