"""Rotary position embeddings as the hub's decoder configs describe them.

A config's rotary settings are normalised to transformers 5's ``rope_parameters``
(``{"rope_type": ..., "rope_theta": ..., ...}``) by :func:`standard_rope_parameters`, from that
key or from the hub's older ``rope_theta`` + ``rope_scaling``. :func:`rope_cos_sin` computes
the cosines and sines of one layer kind's positions, as transformers'
``ROPE_INIT_FUNCTIONS`` and ``dynamic_rope_update`` do (modeling_rope_utils.py): the inverse
frequencies are float32 and computed from the config at every call (transformers keeps them in
a non-persistent buffer: they are in no weight file, and casting the model cannot round them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from js.nn import functional as F

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
# the keys each rope type reads from rope_parameters (checked when a model is built)
_REQUIRED = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


def standard_rope_parameters(values: dict[str, Any]) -> dict[str, Any]:
    """transformers 5's ``rope_parameters`` from a config's keys: ``rope_scaling`` (hub files)
    or ``rope_parameters``, with ``rope_theta`` (default 10000) and ``rope_type`` (from the old
    ``type`` key, default "default") filled in; ``rope_scaling``/``rope_theta`` are removed."""
    scaling = values.pop("rope_scaling", None)
    theta = values.pop("rope_theta", None)
    rope = dict(scaling or values.get("rope_parameters") or {})
    rope.setdefault("rope_theta", 10000.0 if theta is None else theta)
    rope.setdefault("rope_type", rope.get("type", "default"))
    if rope["rope_type"] in ("llama3", "yarn", "longrope", "dynamic"):
        rope.setdefault("original_max_position_embeddings", values.get("max_position_embeddings"))
    return rope


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


def _llama3(owner: str, rope: Mapping[str, Any], inv_freq: jax.Array) -> jax.Array:
    """Llama 3.1's frequency scaling: long wavelengths divided by ``factor``, short ones kept,
    the ones between interpolated smoothly (transformers' ``_compute_llama3_parameters``)."""
    factor = _key(owner, rope, "factor")
    low, high = _key(owner, rope, "low_freq_factor"), _key(owner, rope, "high_freq_factor")
    old_context = _key(owner, rope, "original_max_position_embeddings")
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = jnp.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return jnp.where(medium, smoothed, scaled)


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
    (the head dim, or its rotary part with a ``partial_rotary_factor``)."""
    check_rope(owner, rope)
    kind = rope["rope_type"]
    inv_freq = F.rope_inv_freq(dim, float(rope["rope_theta"]))
    scaling = 1.0
    if kind == "linear":
        inv_freq = inv_freq / _key(owner, rope, "factor")
    elif kind == "llama3":
        inv_freq = _llama3(owner, rope, inv_freq)
    return F.rotary_cos_sin(position_ids, inv_freq, attention_scaling=scaling, dtype=dtype)
