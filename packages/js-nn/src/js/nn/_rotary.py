"""Rotary position embeddings (RoPE) in Hugging Face's "rotate_half" convention.

Llama, Mistral, Qwen2 and most Hugging Face decoders pair feature ``i`` with feature
``i + D/2`` of each head (not the interleaved pairs ``2i, 2i+1`` of the RoPE paper), with the
frequencies ``1 / theta ** (2i / D)``. The three functions are transformers'
``LlamaRotaryEmbedding.compute_default_rope_parameters``, ``LlamaRotaryEmbedding.forward`` and
``apply_rotary_pos_emb``, so that weights converted from a checkpoint give the same numbers.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike


def rope_inv_freq(head_dim: int, theta: float = 10000.0) -> jax.Array:
    """The inverse frequencies ``1 / theta ** (arange(0, head_dim, 2) / head_dim)``, float32,
    computed on the host (a constant inside a traced function).

    Transformers' default RoPE parameters (``rope_theta`` is ``theta``).

    Args:
        head_dim: the features of one attention head D (even).
        theta: the base (``config.rope_theta``: 10000 for Llama 2, 500000 for Llama 3).

    Returns:
        ``[D / 2]`` float32.

    Example:
        >>> import js.nn.functional as F
        >>> F.rope_inv_freq(4, theta=100.0).tolist()
        [1.0, 0.10000000149011612]
    """
    if isinstance(head_dim, bool) or not isinstance(head_dim, numbers.Integral):
        raise TypeError(f"rope_inv_freq: head_dim must be an int, got {head_dim!r}")
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"rope_inv_freq: head_dim must be even and >= 2, got {head_dim}")
    if isinstance(theta, bool) or not isinstance(theta, numbers.Real) or not theta > 0:
        raise ValueError(f"rope_inv_freq: theta must be a positive number, got {theta!r}")
    # on the host in NumPy float32: its power agrees with torch's in 99% of entries, XLA's
    # (folded into a compiled program) in about 65%
    one, base = np.float32(1.0), np.float32(theta)
    exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    with jax.ensure_compile_time_eval():  # a concrete array, even while tracing
        return jnp.asarray(one / base**exponents)


def rotary_cos_sin(
    positions: ArrayLike,
    inv_freq: ArrayLike,
    *,
    attention_scaling: float = 1.0,
    dtype: DTypeLike = jnp.float32,
) -> tuple[jax.Array, jax.Array]:
    """The cosines and sines of the angles ``position * inv_freq`` (:func:`apply_rotary_pos_emb`).

    Transformers' ``LlamaRotaryEmbedding.forward``: the angles in float32, the frequencies
    concatenated with themselves (``D = 2 * len(inv_freq)``), both multiplied by
    ``attention_scaling``, then cast to ``dtype``.

    Args:
        positions: integer positions ``[..., L]`` (``position_ids``, e.g. ``arange(L)[None]``).
        inv_freq: ``[D / 2]``, from :func:`rope_inv_freq` (or a scaled variant).
        attention_scaling: a factor of cos and sin (1.0 for default RoPE; YaRN's differs).
        dtype: the result's dtype: the query's, as transformers passes ``x.dtype``.

    Returns:
        ``(cos, sin)``, each ``[..., L, D]``.

    Example:
        >>> import jax.numpy as jnp, js.nn.functional as F
        >>> cos, sin = F.rotary_cos_sin(jnp.arange(3)[None], F.rope_inv_freq(8))
        >>> cos.shape, cos[0, 0].tolist() == [1.0] * 8
        ((1, 3, 8), True)
    """
    inv_freq = jnp.asarray(inv_freq)
    if inv_freq.ndim != 1:
        raise ValueError(
            f"rotary_cos_sin: inv_freq must be 1-D [D / 2], got shape {list(inv_freq.shape)}"
        )
    positions = jnp.asarray(positions)
    if positions.ndim < 1:
        raise ValueError("rotary_cos_sin: positions must be at least 1-D [..., L], got a scalar")
    freqs = positions[..., None].astype(jnp.float32) * inv_freq.astype(jnp.float32)
    angles = jnp.concatenate([freqs, freqs], axis=-1)
    cos = jnp.cos(angles) * attention_scaling
    sin = jnp.sin(angles) * attention_scaling
    return cos.astype(dtype), sin.astype(dtype)


def rotate_half(x: jax.Array) -> jax.Array:
    """``[x1, x2] -> [-x2, x1]`` over the halves of the last axis (transformers' rotate_half).

    Example:
        >>> import jax.numpy as jnp, js.nn.functional as F
        >>> F.rotate_half(jnp.array([1.0, 2.0, 3.0, 4.0])).tolist()
        [-3.0, -4.0, 1.0, 2.0]
    """
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rotary_pos_emb(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate queries' or keys' features by their positions: ``x*cos + rotate_half(x)*sin``.

    Transformers' ``apply_rotary_pos_emb`` for one tensor (call it on the queries and on the
    keys), with its ``unsqueeze_dim=1``: ``cos``/``sin`` ``[B, L, D]`` broadcast over the heads
    of ``x`` ``[B, H, L, D]``; ``[L, D]`` broadcasts over batch and heads. ``cos`` and ``sin``
    are cast to ``x``'s dtype first, as transformers' rotary embedding returns them in it, so
    the result has ``x``'s dtype.

    Args:
        x: ``[B, H, L, D]`` (any ``[..., H, L, D]``).
        cos: ``[B, L, D]`` or ``[L, D]``, from :func:`rotary_cos_sin`.
        sin: as ``cos``.

    Returns:
        ``x``'s shape and dtype.

    Example:
        >>> import jax.numpy as jnp, js.nn.functional as F
        >>> q = jnp.ones((1, 2, 3, 8))  # [B, H, L, D]
        >>> cos, sin = F.rotary_cos_sin(jnp.arange(3)[None], F.rope_inv_freq(8))
        >>> out = F.apply_rotary_pos_emb(q, cos, sin)
        >>> out.shape, bool(jnp.allclose(out[:, :, 0], q[:, :, 0]))  # position 0: unchanged
        ((1, 2, 3, 8), True)
    """
    if x.ndim < 2 or x.shape[-1] % 2:
        raise ValueError(
            f"apply_rotary_pos_emb: x must be [..., L, D] with D even, got {list(x.shape)}"
        )
    cos, sin = jnp.asarray(cos), jnp.asarray(sin)
    if cos.shape != sin.shape or cos.ndim < 2 or cos.shape[-1] != x.shape[-1]:
        raise ValueError(
            "apply_rotary_pos_emb: cos and sin must share one shape [B, L, D] or [L, D] with "
            f"x's D={x.shape[-1]}, got cos {list(cos.shape)}, sin {list(sin.shape)}, x "
            f"{list(x.shape)}"
        )
    if cos.ndim == 3 and x.ndim >= 4:  # transformers' unsqueeze_dim=1: over the heads
        cos, sin = cos[:, None], sin[:, None]
    try:
        fits = jnp.broadcast_shapes(cos.shape, x.shape) == tuple(x.shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"apply_rotary_pos_emb: cos/sin of shape {list(cos.shape)} do not broadcast over x "
            f"{list(x.shape)} [B, H, L, D]. Fix: cos/sin [B, L, D] or [L, D] for x's B and L"
        )
    cos, sin = cos.astype(x.dtype), sin.astype(x.dtype)
    return x * cos + rotate_half(x) * sin
