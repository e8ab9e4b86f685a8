"""Pure functions behind the layers, under PyTorch's names (``import js.nn.functional as F``).

Every function takes and returns arrays; the layers in ``js.nn`` hold the parameters and call
these. The losses (``cross_entropy``, ``mse_loss``, ...) live in the js-losses distribution and
are reachable here when it is installed.

Example:
    >>> import jax.numpy as jnp
    >>> import js.nn.functional as F
    >>> F.relu(jnp.array([-1.0, 2.0])).tolist()
    [0.0, 2.0]
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
from jax import lax

from ._checks import pair
from ._lstm_kernel import forward_mode
from ._norm_kernel import batch_norm_train

_LOSSES = (
    "cross_entropy",
    "binary_cross_entropy_with_logits",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
)


def _losses_absent(error: ImportError) -> bool:
    """Whether importing js.losses failed because the js-losses distribution is not installed.

    js-core's install-hint finder raises a ModuleNotFoundError named ``js-losses``; a plain
    miss (or ``sys.modules['js.losses'] = None``) names ``js.losses``. Any other ImportError
    comes from inside an installed js-losses (e.g. an interface that does not match js-core).
    """
    return isinstance(error, ModuleNotFoundError) and error.name in ("js-losses", "js.losses")


def __getattr__(name: str):
    # js-nn does not depend on js-losses: import it only when a loss is asked for.
    if name in _LOSSES:
        try:
            losses = importlib.import_module("js.losses")
        except ImportError as error:
            if not _losses_absent(error):
                raise  # installed but broken: the real error, unchanged
            raise ImportError(
                f"js.nn.functional.{name} is provided by the js-losses distribution, which is "
                "not installed. Fix: pip install js-losses"
            ) from error
        return getattr(losses, name)
    raise AttributeError(f"module 'js.nn.functional' has no attribute {name!r}")


# -- linear and convolution -----------------------------------------------------------------


def linear(input, weight, bias=None):
    """``y = x W^T + b`` with ``weight`` ``[O, I]``: ``[..., I] -> [..., O]``."""
    y = jnp.matmul(input, jnp.swapaxes(weight, -1, -2))
    return y if bias is None else y + bias


def _conv_padding(padding, n: int):
    if isinstance(padding, str):
        upper = padding.upper()
        if upper not in ("SAME", "VALID"):
            raise ValueError(f"padding must be an int, a pair, 'SAME' or 'VALID', got {padding!r}")
        return upper
    pads = (padding,) * n if isinstance(padding, int) else tuple(padding)
    return [(p, p) for p in pads]


def _conv(input, weight, bias, stride, padding, groups, spec):
    n = input.ndim - 2
    stride = (stride,) * n if isinstance(stride, int) else tuple(stride)
    y = lax.conv_general_dilated(
        input,
        weight,
        window_strides=stride,
        padding=_conv_padding(padding, n),
        dimension_numbers=spec,
        feature_group_count=groups,
    )
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * n)
    return y


def conv1d(input, weight, bias=None, stride=1, padding=0, groups=1):
    """1-D cross-correlation: input ``[B, C_in, L]``, weight ``[C_out, C_in/groups, K]``."""
    return _conv(input, weight, bias, stride, padding, groups, ("NCH", "OIH", "NCH"))


def conv2d(input, weight, bias=None, stride=1, padding=0, groups=1):
    """2-D cross-correlation, NCHW: weight ``[C_out, C_in/groups, KH, KW]``.

    ``padding`` is an int, a pair, or ``'SAME'``/``'VALID'`` (either case).
    """
    return _conv(input, weight, bias, stride, padding, groups, ("NCHW", "OIHW", "NCHW"))


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0):
    """Transposed 2-D convolution, NCHW, with weight ``[C_out, C_in, KH, KW]``.

    Unlike PyTorch's ``[C_in, C_out, KH, KW]``: see ``docs/nn.md``. Each output spatial size is
    ``(input - 1) * stride - 2 * padding + kernel_size + output_padding``.
    """
    stride = pair(stride, "stride", "conv_transpose2d")
    padding = pair(padding, "padding", "conv_transpose2d")
    output_padding = pair(output_padding, "output_padding", "conv_transpose2d")
    kernel = weight.shape[2:]
    # A transposed convolution is the convolution of the stride-dilated input with the
    # spatially flipped kernel, padded by k - 1 - p (plus output_padding at the far end).
    pads = [
        (k - 1 - p, k - 1 - p + op)
        for k, p, op in zip(kernel, padding, output_padding, strict=True)
    ]
    y = lax.conv_general_dilated(
        input,
        jnp.flip(weight, axis=(2, 3)),
        window_strides=(1, 1),
        padding=pads,
        lhs_dilation=stride,
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    )
    return y if bias is None else y + bias.reshape(1, -1, 1, 1)


# -- pooling --------------------------------------------------------------------------------


def _pool(input, kernel_size, stride, init, op):
    kernel = pair(kernel_size, "kernel_size", "pool")
    stride = kernel if stride is None else pair(stride, "stride", "pool")
    return lax.reduce_window(input, init, op, (1, 1) + kernel, (1, 1) + stride, "VALID")


def _max_pool_tiled(input, kernel):
    """Non-overlapping max pooling (stride == kernel) as a reshape, an argmax and a select.

    Same values and gradients as ``reduce_window`` (the whole gradient goes to the first
    maximum of a window, as in PyTorch), but the backward pass is an elementwise select instead
    of XLA's ``select_and_scatter``, which is slow on the CPU (measured: a [64, 32, 28, 28]
    ReLU + 2x2 pool forward and backward 40 ms -> 6.5 ms; see docs/benchmarks.md).
    """
    B, C, H, W = input.shape
    kh, kw = kernel
    ho, wo = H // kh, W // kw  # VALID windows: a remainder row or column is dropped
    windows = input[:, :, : ho * kh, : wo * kw].reshape(B, C, ho, kh, wo, kw)
    windows = windows.transpose(0, 1, 2, 4, 3, 5).reshape(B, C, ho, wo, kh * kw)
    first = jnp.argmax(windows, axis=-1)[..., None] == jnp.arange(kh * kw)  # [B, C, ho, wo, k]
    return jnp.sum(jnp.where(first, windows, jnp.zeros((), windows.dtype)), axis=-1)


def max_pool2d(input, kernel_size, stride=None):
    """Maximum over valid ``kernel_size`` windows of an NCHW input (``stride`` defaults to it)."""
    kernel = pair(kernel_size, "kernel_size", "max_pool2d")
    if (stride is None or pair(stride, "stride", "max_pool2d") == kernel) and input.ndim == 4:
        return _max_pool_tiled(input, kernel)
    return _pool(input, kernel_size, stride, -jnp.inf, lax.max)


def avg_pool2d(input, kernel_size, stride=None):
    """Mean over valid ``kernel_size`` windows of an NCHW input (``stride`` defaults to it)."""
    kh, kw = pair(kernel_size, "kernel_size", "avg_pool2d")
    return _pool(input, kernel_size, stride, 0.0, lax.add) / (kh * kw)


def adaptive_avg_pool2d(input, output_size):
    """Global spatial mean ``[B, C, H, W] -> [B, C, 1, 1]``; only ``output_size`` 1 or (1, 1)."""
    if output_size not in (1, (1, 1), [1, 1]):
        raise NotImplementedError(
            f"adaptive_avg_pool2d supports only output_size (1, 1) (a global mean), got "
            f"{output_size!r}. Fix: use avg_pool2d with an explicit window"
        )
    return jnp.mean(input, axis=(2, 3), keepdims=True)


# -- normalization --------------------------------------------------------------------------


def batch_norm(
    input,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training=False,
    momentum=0.1,
    eps=1e-5,
):
    """Batch normalization over every axis but 1 (channels); returns ``(y, mean, var)``.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias``. In training, ``mean``/``var`` are the
    batch mean and *population* (biased) variance, and the returned running statistics are
    ``(1 - momentum) * running + momentum * batch`` for both (the spec's rule; PyTorch updates
    the running variance with the unbiased estimate). In evaluation the running statistics
    normalise and are returned unchanged. Pure: nothing is updated in place.
    """
    shape = (1, -1) + (1,) * (input.ndim - 2)
    if training and _fused_batch_norm(input, weight, bias):
        y, mean, var = batch_norm_train(input, weight, bias, eps)  # hand-written backward
        return (y, *_running_stats(running_mean, running_var, mean, var, momentum))
    if training:
        axes = (0,) + tuple(range(2, input.ndim))
        mean = jnp.mean(input, axis=axes)
        var = jnp.mean(jnp.square(input - mean.reshape(shape)), axis=axes)
        running_mean, running_var = _running_stats(running_mean, running_var, mean, var, momentum)
    else:
        mean, var = running_mean, running_var
    y = (input - mean.reshape(shape)) * lax.rsqrt(var.reshape(shape) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y, running_mean, running_var


def _running_stats(running_mean, running_var, mean, var, momentum):
    """``(1 - momentum) * running + momentum * batch`` for both, without gradient."""
    if running_mean is None:
        return running_mean, running_var
    mean, var = lax.stop_gradient((mean, var))
    return (1 - momentum) * running_mean + momentum * mean, (
        (1 - momentum) * running_var + momentum * var
    )


def _fused_batch_norm(input, weight, bias) -> bool:
    """Whether training-mode batch_norm takes the hand-written backward (``_norm_kernel``):
    affine, and no forward-mode derivative (jvp/jacfwd/hessian) being taken of it."""
    return weight is not None and bias is not None and not forward_mode(input, weight, bias)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise the trailing ``len(normalized_shape)`` axes (population variance)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    mean = jnp.mean(input, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(input - mean), axis=axes, keepdims=True)
    y = (input - mean) * lax.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


# -- dropout and embedding ------------------------------------------------------------------


def dropout(input, p=0.5, training=True, *, key=None):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    ``key`` is a JAX random key (``rngs.next("dropout")``), needed when ``training`` and
    ``p > 0``; otherwise the input is returned unchanged.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    if key is None:
        raise ValueError(
            "dropout in training needs a random key. Fix: pass key=rngs.next('dropout'), "
            "or training=False"
        )
    if p == 1.0:
        return jnp.zeros_like(input)
    keep = jax.random.bernoulli(key, 1.0 - p, jnp.shape(input))
    return jnp.where(keep, input / (1.0 - p), jnp.zeros((), jnp.result_type(input)))


def embedding(input, weight):
    """Rows of ``weight`` ``[V, D]`` at integer ``input`` ``[...]``: ``[..., D]``.

    Indices must be in ``[0, V)``: a data precondition, not checked in compiled code.
    """
    return jnp.take(weight, input, axis=0)


# -- activations ----------------------------------------------------------------------------


def relu(input):
    """``max(x, 0)``."""
    return jax.nn.relu(input)


def gelu(input, approximate="none"):
    """``x * Phi(x)`` (exact, erf-based); ``approximate='tanh'`` uses the tanh formula."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return jax.nn.gelu(input, approximate=approximate == "tanh")


def tanh(input):
    """Hyperbolic tangent."""
    return jnp.tanh(input)


def sigmoid(input):
    """``1 / (1 + exp(-x))``."""
    return jax.nn.sigmoid(input)


def softmax(input, dim=-1):
    """``exp(x) / sum(exp(x))`` along ``dim``."""
    return jax.nn.softmax(input, axis=dim)


def log_softmax(input, dim=-1):
    """``x - logsumexp(x)`` along ``dim``."""
    return jax.nn.log_softmax(input, axis=dim)
