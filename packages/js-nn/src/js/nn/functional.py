"""Pure functions behind the layers, under PyTorch's names (``import js.nn.functional as F``).

Every function takes and returns arrays; the layers in ``js.nn`` hold the parameters and call
these. The spec's losses (``cross_entropy``, ``binary_cross_entropy_with_logits``, ``mse_loss``,
``l1_loss``, ``smooth_l1_loss``) are here as PyTorch users write them (``F.cross_entropy``):
the functions of ``js.losses`` themselves, their one implementation (js-nn depends on js-losses).

Example:
    >>> import jax.numpy as jnp
    >>> import js.nn.functional as F
    >>> F.relu(jnp.array([-1.0, 2.0])).tolist()
    [0.0, 2.0]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from js.losses import binary_cross_entropy_with_logits as binary_cross_entropy_with_logits
from js.losses import cross_entropy as cross_entropy
from js.losses import l1_loss as l1_loss
from js.losses import mse_loss as mse_loss
from js.losses import smooth_l1_loss as smooth_l1_loss

from ._checks import as_tuple, check_probability
from ._lstm_kernel import forward_mode
from ._norm_kernel import batch_norm_train, layer_norm_affine

# Pooling (PyTorch's window arithmetic), resizing, attention and rotary embeddings live in their
# own files; these are their public doors under PyTorch's (and transformers') names.
from ._pool_ops import adaptive_avg_pool1d as adaptive_avg_pool1d
from ._pool_ops import adaptive_avg_pool2d as adaptive_avg_pool2d
from ._pool_ops import avg_pool1d as avg_pool1d
from ._pool_ops import avg_pool2d as avg_pool2d
from ._pool_ops import max_pool1d as max_pool1d
from ._pool_ops import max_pool2d as max_pool2d
from ._rotary import apply_rotary_pos_emb as apply_rotary_pos_emb
from ._rotary import rope_inv_freq as rope_inv_freq
from ._rotary import rotary_cos_sin as rotary_cos_sin
from ._rotary import rotate_half as rotate_half
from ._sdpa import scaled_dot_product_attention as scaled_dot_product_attention
from ._upsample import interpolate as interpolate

# -- linear and convolution -----------------------------------------------------------------


def linear(input: jax.Array, weight: jax.Array, bias: jax.Array | None = None) -> jax.Array:
    """``y = x W^T + b`` with ``weight`` ``[O, I]``: ``[..., I] -> [..., O]``."""
    if jnp.ndim(weight) != 2:  # PyTorch's linear takes a matrix or a vector only; matmul's rules
        y = jnp.matmul(input, jnp.swapaxes(weight, -1, -2))
    else:  # one dot contracting the weight's input axis where it lies: XLA on the CPU copied a
        # transposed weight, and inside a decode loop it did so on every step
        dtype = jnp.result_type(input, weight)  # matmul's promotion
        input, weight = jnp.asarray(input, dtype), jnp.asarray(weight, dtype)
        y = jax.lax.dot_general(input, weight, (((input.ndim - 1,), (1,)), ((), ())))
    return y if bias is None else y + bias


def conv_padding(
    padding: int | tuple[int, ...] | str,
    sizes: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: int | tuple[int, ...],
    dilation: int | tuple[int, ...],
) -> list[tuple[int, int]]:
    """Explicit ``(low, high)`` zeros per spatial axis for an int, a tuple, ``'valid'`` or
    ``'same'`` (either case).

    ``'same'`` pads ``total = dilation * (kernel - 1)`` per axis at stride 1, the extra one of
    an odd total on the high (right/bottom) side, exactly as PyTorch does for even kernels;
    with a stride above 1 (which PyTorch refuses) it follows XLA's ``'SAME'``: the output is
    ``ceil(size / stride)``.
    """
    n = len(sizes)
    if isinstance(padding, str):
        mode = padding.lower()
        if mode not in ("same", "valid"):
            raise ValueError(f"padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
        if mode == "valid":
            return [(0, 0)] * n
        pads = []
        strides, dilations = as_tuple(stride, n), as_tuple(dilation, n)
        for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
            total = max((-(-size // s) - 1) * s + d * (k - 1) + 1 - size, 0)
            pads.append((total // 2, total - total // 2))
        return pads
    return [(p, p) for p in as_tuple(padding, n)]


def _conv(input, weight, bias, stride, padding, dilation, groups, spec):
    n = input.ndim - 2
    pads = conv_padding(padding, input.shape[2:], weight.shape[2:], stride, dilation)
    y = lax.conv_general_dilated(
        input,
        weight,
        window_strides=as_tuple(stride, n),
        padding=pads,
        rhs_dilation=as_tuple(dilation, n),
        dimension_numbers=spec,
        feature_group_count=groups,
    )
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * n)
    return y


_SPECS = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW")}


def conv1d(
    input: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None = None,
    stride: int | tuple[int, ...] = 1,
    padding: int | tuple[int, ...] | str = 0,
    dilation: int | tuple[int, ...] = 1,
    groups: int = 1,
) -> jax.Array:
    """1-D cross-correlation: input ``[B, C_in, L]``, weight ``[C_out, C_in/groups, K]``.

    PyTorch's argument order; ``padding`` is an int, a 1-tuple, ``'same'`` or ``'valid'``.
    """
    return _conv(input, weight, bias, stride, padding, dilation, groups, _SPECS[1])


def conv2d(
    input: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None = None,
    stride: int | tuple[int, ...] = 1,
    padding: int | tuple[int, ...] | str = 0,
    dilation: int | tuple[int, ...] = 1,
    groups: int = 1,
) -> jax.Array:
    """2-D cross-correlation, NCHW: weight ``[C_out, C_in/groups, KH, KW]``.

    PyTorch's argument order; ``padding`` is an int, a pair, ``'same'`` or ``'valid'``.
    """
    return _conv(input, weight, bias, stride, padding, dilation, groups, _SPECS[2])


def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation):
    n = input.ndim - 2
    stride, padding = as_tuple(stride, n), as_tuple(padding, n)
    output_padding, dilation = as_tuple(output_padding, n), as_tuple(dilation, n)
    # A transposed convolution is the convolution of the stride-dilated input with the
    # spatially flipped kernel, padded by d * (k - 1) - p (plus output_padding at the far end).
    pads = [
        (d * (k - 1) - p, d * (k - 1) - p + op)
        for k, p, op, d in zip(weight.shape[2:], padding, output_padding, dilation, strict=True)
    ]
    y = lax.conv_general_dilated(
        input,
        jnp.flip(weight, axis=tuple(range(2, 2 + n))),
        window_strides=(1,) * n,
        padding=pads,
        lhs_dilation=stride,
        rhs_dilation=dilation,
        dimension_numbers=_SPECS[n],
        feature_group_count=groups,
    )
    return y if bias is None else y + bias.reshape((1, -1) + (1,) * n)


def conv_transpose1d(
    input: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None = None,
    stride: int | tuple[int, ...] = 1,
    padding: int | tuple[int, ...] = 0,
    output_padding: int | tuple[int, ...] = 0,
    groups: int = 1,
    dilation: int | tuple[int, ...] = 1,
) -> jax.Array:
    """Transposed 1-D convolution with weight ``[C_out, C_in/groups, K]`` (see conv_transpose2d)."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(
    input: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None = None,
    stride: int | tuple[int, ...] = 1,
    padding: int | tuple[int, ...] = 0,
    output_padding: int | tuple[int, ...] = 0,
    groups: int = 1,
    dilation: int | tuple[int, ...] = 1,
) -> jax.Array:
    """Transposed 2-D convolution, NCHW, with weight ``[C_out, C_in/groups, KH, KW]``.

    PyTorch's argument order, but not its weight layout ``[C_in, C_out/groups, KH, KW]``: see
    ``docs/nn.md``. Each output spatial size is
    ``(input - 1) * stride - 2 * padding + dilation * (kernel_size - 1) + output_padding + 1``.
    """
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation)


# -- pooling --------------------------------------------------------------------------------


# -- normalization --------------------------------------------------------------------------


def batch_norm(
    input: jax.Array,
    running_mean: jax.Array | None,
    running_var: jax.Array | None,
    weight: jax.Array | None = None,
    bias: jax.Array | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """Batch normalization over every axis but 1 (channels); returns ``(y, mean, var)``.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias``. In training, ``mean``/``var`` are the
    batch mean and *population* (biased) variance, and the returned running statistics are
    ``(1 - momentum) * running + momentum * batch`` for both (the spec's rule; PyTorch updates
    the running variance with the unbiased estimate). In evaluation the running statistics
    normalise and are returned unchanged; without them (``None``, a layer built with
    ``track_running_stats=False``) the batch statistics normalise in both modes. Pure: nothing
    is updated in place.
    """
    shape = (1, -1) + (1,) * (input.ndim - 2)
    batch_stats = training or running_mean is None  # no running statistics: the batch's
    if batch_stats and _fused_batch_norm(input, weight, bias):
        y, mean, var = batch_norm_train(input, weight, bias, eps)  # hand-written backward
        return y, *_running_stats(running_mean, running_var, mean, var, momentum)
    if batch_stats:
        axes = (0,) + tuple(range(2, input.ndim))
        mean = jnp.mean(input, axis=axes)
        var = jnp.mean(jnp.square(input - mean.reshape(shape)), axis=axes)
        running_mean, running_var = _running_stats(running_mean, running_var, mean, var, momentum)
    else:
        # batch_stats is False only with running statistics, which layers pass as a pair
        assert running_mean is not None and running_var is not None
        mean, var = running_mean, running_var
    y = (input - mean.reshape(shape)) * lax.rsqrt(var.reshape(shape) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y, running_mean, running_var


def _running_stats(
    running_mean: jax.Array | None,
    running_var: jax.Array | None,
    mean: jax.Array,
    var: jax.Array,
    momentum: float,
) -> tuple[jax.Array | None, jax.Array | None]:
    """``(1 - momentum) * running + momentum * batch`` for both, without gradient."""
    if running_mean is None or running_var is None:  # layers pass both or neither
        return running_mean, running_var
    mean, var = lax.stop_gradient((mean, var))
    return (1 - momentum) * running_mean + momentum * mean, (
        (1 - momentum) * running_var + momentum * var
    )


def _fused_batch_norm(input, weight, bias) -> bool:
    """Whether training-mode batch_norm takes the hand-written backward (``_norm_kernel``):
    affine, and no forward-mode derivative (jvp/jacfwd/hessian) being taken of it."""
    return weight is not None and bias is not None and not forward_mode(input, weight, bias)


def layer_norm(
    input: jax.Array,
    normalized_shape: int | tuple[int, ...],
    weight: jax.Array | None = None,
    bias: jax.Array | None = None,
    eps: float = 1e-5,
) -> jax.Array:
    """Normalise the trailing ``len(normalized_shape)`` axes (population variance).

    With a ``weight`` (and no forward-mode derivative being taken) the backward pass is the
    closed form of ``_norm_kernel.layer_norm_affine``, which XLA compiles several times faster
    than the autodiff of this formula; the values are the same.
    """
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if _fused_layer_norm(input, weight, bias):
        assert weight is not None  # (checked there)
        bias = jnp.zeros_like(weight) if bias is None else bias
        return layer_norm_affine(input, weight, bias, len(shape), float(eps))
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    mean = jnp.mean(input, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(input - mean), axis=axes, keepdims=True)
    y = (input - mean) * lax.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def _fused_layer_norm(input, weight, bias) -> bool:
    """Whether layer_norm takes the hand-written backward: a weight, one dtype for the input,
    weight and bias (the closed form returns the input's dtype), no forward-mode derivative."""
    dtypes = {jnp.result_type(a) for a in (input, weight, bias) if a is not None}
    return weight is not None and len(dtypes) == 1 and not forward_mode(input, weight, bias)


def _trailing_shape(name: str, normalized_shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, int) and not isinstance(normalized_shape, bool):
        return (normalized_shape,)
    if not isinstance(normalized_shape, (tuple, list)) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in normalized_shape
    ):
        raise TypeError(
            f"{name}: normalized_shape must be an int or a tuple of ints, got {normalized_shape!r}"
        )
    return tuple(normalized_shape)


def rms_norm(
    input: jax.Array,
    normalized_shape: int | tuple[int, ...] | list[int],
    weight: jax.Array | None = None,
    eps: float | None = None,
) -> jax.Array:
    """Root-mean-square normalization over the trailing ``normalized_shape`` axes (PyTorch's).

    ``y = x / sqrt(mean(x ** 2) + eps) * weight``, the mean over the trailing axes, no centring
    and no bias (Llama's, Mistral's, T5's norm). As PyTorch 2.13 computes it, half-precision
    inputs (float16, bfloat16) are normalised and scaled by ``weight`` in float32 and the result
    is cast back to the input's dtype; ``eps=None`` is the machine epsilon of that computing
    dtype (``jnp.finfo(jnp.float32).eps`` for float16, bfloat16 and float32 inputs).

    Args:
        input: ``[..., *normalized_shape]``.
        normalized_shape: an int or the tuple of trailing dimensions.
        weight: ``normalized_shape``, or None for no scale.
        eps: added to the mean square; None for the machine epsilon as above.

    Returns:
        An array of the input's shape and dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> import js.nn.functional as F
        >>> F.rms_norm(jnp.array([[2.0, -2.0], [4.0, 4.0]]), 2, eps=0.0).tolist()
        [[1.0, -1.0], [1.0, 1.0]]
    """
    shape = _trailing_shape("rms_norm", normalized_shape)
    n = len(shape)
    if input.ndim < n or tuple(input.shape[input.ndim - n :]) != shape:
        raise ValueError(
            f"rms_norm: given normalized_shape={list(shape)}, expected input with shape "
            f"[*, {', '.join(map(str, shape))}], got {list(input.shape)}"
        )
    if weight is not None and tuple(jnp.shape(weight)) != shape:
        raise ValueError(
            f"rms_norm: weight must have shape normalized_shape={list(shape)}, got "
            f"{list(jnp.shape(weight))}"
        )
    # PyTorch's opmath type: float32 for the half-precision types, the input's own otherwise.
    compute = jnp.promote_types(input.dtype, jnp.float32)
    x = input.astype(compute)
    axes = tuple(range(input.ndim - n, input.ndim))
    if eps is None:
        eps = float(jnp.finfo(compute).eps)
    y = x * lax.rsqrt(jnp.mean(jnp.square(x), axis=axes, keepdims=True) + eps)
    if weight is not None:
        y = y * weight.astype(compute)
    return y.astype(input.dtype)


def group_norm(
    input: jax.Array,
    num_groups: int,
    weight: jax.Array | None = None,
    bias: jax.Array | None = None,
    eps: float = 1e-5,
) -> jax.Array:
    """Normalise each of ``num_groups`` channel groups of each example (population variance).

    Input ``[B, C, *]`` with C divisible by ``num_groups``; ``weight``/``bias`` ``[C]``.
    """
    shape = input.shape
    x = input.reshape(shape[0], num_groups, -1)  # [B, G, C / G * prod(*)]
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    y = ((x - mean) * lax.rsqrt(var + eps)).reshape(shape)
    channel = (1, -1) + (1,) * (input.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(channel)
    return y if bias is None else y + bias.reshape(channel)


# -- dropout and embedding ------------------------------------------------------------------


def _check_dropout(p, training, key):
    check_probability("js.nn.functional.dropout", "p", p)
    if training and p != 0.0 and key is None:
        raise ValueError(
            "dropout in training needs a random key. Fix: pass key=rngs.next('dropout'), "
            "or training=False"
        )
    return training and p != 0.0


def _drop(input, p, key, mask_shape):
    if p == 1.0:
        return jnp.zeros_like(input)
    keep = jax.random.bernoulli(key, 1.0 - p, mask_shape)  # broadcast over the rest
    return jnp.where(keep, input / (1.0 - p), jnp.zeros((), jnp.result_type(input)))


def dropout(
    input: jax.Array,
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    *,
    key: jax.Array | None = None,
) -> jax.Array:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    ``key`` is a JAX random key (``rngs.next("dropout")``), needed when ``training`` and
    ``p > 0``; otherwise the input is returned unchanged. ``inplace`` is ignored.
    """
    if not _check_dropout(p, training, key):
        return input
    return _drop(input, p, key, jnp.shape(input))


def _channel_dropout(input, p, training, key, spatial: int):
    if not _check_dropout(p, training, key):
        return input
    shape = jnp.shape(input)
    return _drop(input, p, key, shape[: len(shape) - spatial] + (1,) * spatial)


def dropout1d(
    input: jax.Array,
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    *,
    key: jax.Array | None = None,
) -> jax.Array:
    """Zero whole channels of ``[B, C, L]`` (or ``[C, L]``) with probability ``p``, scaling
    the kept ones by ``1 / (1 - p)``; ``key`` as in ``dropout``."""
    return _channel_dropout(input, p, training, key, 1)


def dropout2d(
    input: jax.Array,
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    *,
    key: jax.Array | None = None,
) -> jax.Array:
    """Zero whole channels of ``[B, C, H, W]`` with probability ``p``, scaling the kept ones
    by ``1 / (1 - p)``; ``key`` as in ``dropout``."""
    return _channel_dropout(input, p, training, key, 2)


def embedding(
    input: jax.typing.ArrayLike, weight: jax.Array, padding_idx: int | None = None
) -> jax.Array:
    """Rows of ``weight`` ``[V, D]`` at integer ``input`` ``[...]``: ``[..., D]``.

    Indices must be in ``[0, V)``: a data precondition, not checked in compiled code. Rows
    looked up at ``padding_idx`` pass no gradient to ``weight`` (PyTorch's rule); their value
    is the row as it is.
    """
    rows = jnp.take(weight, input, axis=0)
    if padding_idx is None:
        return rows
    padding = (jnp.asarray(input) == padding_idx)[..., None]
    return jnp.where(padding, lax.stop_gradient(rows), rows)


# -- activations ----------------------------------------------------------------------------


# ``inplace`` is PyTorch's flag, accepted and ignored: JAX arrays are immutable.


def relu(input: jax.Array, inplace: bool = False) -> jax.Array:
    """``max(x, 0)``."""
    return jax.nn.relu(input)


def relu6(input: jax.Array, inplace: bool = False) -> jax.Array:
    """``min(max(x, 0), 6)``."""
    return jnp.clip(input, 0, 6)


def leaky_relu(input: jax.Array, negative_slope: float = 0.01, inplace: bool = False) -> jax.Array:
    """``x`` where ``x >= 0``, else ``negative_slope * x``."""
    return jnp.where(input >= 0, input, input * negative_slope)


def elu(input: jax.Array, alpha: float = 1.0, inplace: bool = False) -> jax.Array:
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    return jnp.where(input > 0, input, alpha * jnp.expm1(jnp.minimum(input, 0)))


def hardtanh(
    input: jax.Array, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> jax.Array:
    """``clip(x, min_val, max_val)``."""
    return jnp.clip(input, min_val, max_val)


def silu(input: jax.Array, inplace: bool = False) -> jax.Array:
    """``x * sigmoid(x)``."""
    return jax.nn.silu(input)


def gelu(input: jax.Array, approximate: str = "none") -> jax.Array:
    """``x * Phi(x)`` (exact, erf-based); ``approximate='tanh'`` uses the tanh formula."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return jax.nn.gelu(input, approximate=approximate == "tanh")


def tanh(input: jax.Array) -> jax.Array:
    """Hyperbolic tangent."""
    return jnp.tanh(input)


def sigmoid(input: jax.Array) -> jax.Array:
    """``1 / (1 + exp(-x))``."""
    return jax.nn.sigmoid(input)


def softmax(input: jax.Array, dim: int = -1) -> jax.Array:
    """``exp(x) / sum(exp(x))`` along ``dim``."""
    return jax.nn.softmax(input, axis=dim)


def log_softmax(input: jax.Array, dim: int = -1) -> jax.Array:
    """``x - logsumexp(x)`` along ``dim``."""
    return jax.nn.log_softmax(input, axis=dim)
