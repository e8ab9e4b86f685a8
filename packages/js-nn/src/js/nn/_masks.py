"""Attention masks, in one place: boolean, **True = allowed**, broadcasting to the scores
``[B, heads, Tq, Tk]``.

Every mask js builds comes from here: ``causal_mask`` and ``padding_mask`` (public in
``js.nn.attention``), ``decoder_mask`` (a decoder's causal mask with padding, a sliding window
and packed sequences, as transformers' ``create_causal_mask`` builds it), and ``allowed``, the
rule the three and ``KVCache.mask`` share: key ``j`` is visible from query ``i`` when
``j <= i`` and, with a sliding window ``w``, ``i - j < w``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import check_int


def allowed(query: jax.Array, key: jax.Array, window: int | None = None) -> jax.Array:
    """``key <= query`` (and ``key > query - window``), broadcast: the causal rule on query and
    key positions (or cache slots) of any broadcastable shapes."""
    visible = key <= query
    if window is not None:
        visible = visible & (key > query - window)
    return visible


def causal_mask(T: int, *, window: int | None = None) -> jax.Array:
    """Allow each query position ``t`` to attend to keys ``0..t`` (the last ``window`` of them
    with a sliding window): ``[1, 1, T, T]`` bool.

    Example:
        >>> from js.nn.attention import causal_mask
        >>> causal_mask(3)[0, 0].astype(int).tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
        >>> causal_mask(3, window=2)[0, 0].astype(int).tolist()
        [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    """
    T = check_int("causal_mask", "T", T)
    if window is not None:
        check_int("causal_mask", "window", window)
    idx = jnp.arange(T)
    return allowed(idx[:, None], idx[None, :], window)[None, None]  # [1, 1, T, T]


def padding_mask(valid: jax.typing.ArrayLike) -> jax.Array:
    """Allow only valid key positions: ``valid [B, T]`` bool -> ``[B, 1, 1, T]`` bool.

    Only keys are masked: padded *query* positions still produce outputs, which the loss must
    mask out itself.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.nn.attention import padding_mask
        >>> padding_mask(jnp.array([[True, True, False]])).shape
        (1, 1, 1, 3)
    """
    valid = valid if isinstance(valid, jax.Array) else np.asarray(valid)
    if valid.dtype != bool:
        raise TypeError(f"padding_mask: valid must be boolean [B, T], got dtype {valid.dtype}")
    if valid.ndim != 2:
        raise ValueError(f"padding_mask: expected valid [B, T], got shape {list(valid.shape)}")
    return jnp.asarray(valid)[:, None, None, :]  # [B, 1, 1, T]


def decoder_mask(
    T: int,
    attention_mask: jax.typing.ArrayLike | None = None,
    *,
    window: int | None = None,
    packed_positions: jax.typing.ArrayLike | None = None,
) -> jax.Array:
    """A decoder's self-attention mask over ``T`` tokens, as transformers'
    ``create_causal_mask`` / ``create_sliding_window_causal_mask`` build it: ``[B|1, 1, T, T]``
    bool.

    Args:
        T: tokens per row.
        attention_mask: ``[B, T]``, nonzero for real tokens, 0 for padding (left or right):
            padded keys are hidden. None: every token is real.
        window: a sliding window (each query sees itself and the ``window - 1`` keys before).
        packed_positions: ``[B, T]`` positions that restart where a packed sequence begins
            (used only without ``attention_mask``): each sequence attends to itself only, by
            position.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.nn.attention import decoder_mask
        >>> decoder_mask(3, jnp.array([[0, 1, 1]]))[0, 0].astype(int).tolist()
        [[0, 0, 0], [0, 1, 0], [0, 1, 1]]
        >>> decoder_mask(4, packed_positions=jnp.array([[0, 1, 0, 1]]))[0, 0, 3].tolist()
        [False, False, True, True]
    """
    T = check_int("decoder_mask", "T", T)
    idx = jnp.arange(T)
    q, kv = idx[:, None], idx[None, :]  # [T, 1], [1, T]
    visible = allowed(q, kv, window)[None]  # [1, T, T]
    if attention_mask is not None:
        if tuple(jnp.shape(attention_mask))[-1:] != (T,) or jnp.ndim(attention_mask) != 2:
            raise ValueError(
                f"decoder_mask: attention_mask must be [B, T] with T={T}, got shape "
                f"{list(jnp.shape(attention_mask))}"
            )
        visible = visible & (jnp.asarray(attention_mask) != 0)[:, None, :]  # [B, T, T]
    elif packed_positions is not None:
        pos = jnp.asarray(packed_positions)  # [B, T]
        steps = jnp.diff(pos, axis=-1, prepend=pos[:, :1] - 1)
        run = jnp.cumsum(steps != 1, axis=-1)  # [B, T]: which packed sequence
        same = run[:, :, None] == run[:, None, :]
        visible = visible & same & allowed(pos[:, :, None], pos[:, None, :])
    return visible[:, None]  # [B|1, 1, T, T]
