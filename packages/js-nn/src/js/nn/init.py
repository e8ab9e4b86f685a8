"""PyTorch's ``torch.nn.init`` for js Parameters: in place, from an explicit random stream.

Each function takes a ``Parameter`` (or ``Buffer``), replaces its array with one of the same
shape, dtype and sharding, and returns the Parameter, so torch code ports as written::

    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu", rngs=rngs)
    nn.init.normal_(m.weight.data, 0.0, 0.02, rngs=rngs)  # ``.data`` is the Parameter itself

**Where the randomness comes from.** PyTorch draws from one hidden global generator
(``torch.manual_seed``), so the values depend on every draw made before. js has no global
state: every random initialiser needs ``rngs=js.Rngs(params=...)`` (it takes one key from the
``params`` stream, advancing it) or ``seed=`` (an int; the same seed gives the same values).
Passing neither, or both, is an error. The same seed does not give torch's numbers: the streams
differ; the distributions are torch's.

Values are drawn on the host (NumPy, float64, then cast), as the layers' own initial weights
are, so no program is compiled per shape. Call these outside compiled code (``js.jit``).

**Fans.** ``fan_in``/``fan_out`` follow ``torch.nn.init._calculate_fan_in_and_fan_out`` on the
array's own layout: dimension 1 counts inputs, dimension 0 outputs, the rest is the receptive
field. js's Linear ``[O, I]`` and convolution ``[O, I/groups, *kernel]`` weights are torch's
layouts, so the fans are torch's.
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.core  # jax.core.Tracer below; pyright knows a submodule only once imported
import numpy as np
from flax import nnx

import js

from . import _random
from ._checks import check_int

__all__ = [
    "calculate_fan_in_and_fan_out",
    "calculate_gain",
    "constant_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "orthogonal_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]

_LINEAR = (
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "sigmoid",
)
_GAINS = {"tanh": 5.0 / 3, "relu": math.sqrt(2.0), "selu": 3.0 / 4}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for ``nonlinearity``, torch's table.

    ``1`` for linear, convolution and sigmoid; ``5/3`` tanh; ``sqrt(2)`` relu; ``3/4`` selu;
    ``sqrt(2 / (1 + slope^2))`` leaky_relu with negative slope ``param`` (default 0.01).

    Example:
        >>> import js.nn
        >>> round(js.nn.init.calculate_gain("leaky_relu", 0.2), 4)
        1.3868
    """
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity in _GAINS:
        return _GAINS[nonlinearity]
    if nonlinearity != "leaky_relu":
        known = sorted({*_LINEAR, *_GAINS, "leaky_relu"})
        raise ValueError(
            f"nn.init.calculate_gain: unsupported nonlinearity {nonlinearity!r}; expected one "
            f"of {known}. Fix: pass one of those names"
        )
    if param is None:
        return math.sqrt(2.0 / (1 + 0.01**2))
    if isinstance(param, (bool, np.bool_)) or not isinstance(param, numbers.Real):
        raise ValueError(
            f"nn.init.calculate_gain: negative_slope {param!r} is not a number. "
            "Fix: pass the leaky_relu slope as a float, e.g. 0.01"
        )
    return math.sqrt(2.0 / (1 + param**2))


def _shape(name: str, tensor) -> tuple[int, ...]:
    if isinstance(tensor, nnx.Variable):
        return tuple(tensor.get_raw_value().shape)
    if hasattr(tensor, "shape"):
        return tuple(tensor.shape)
    raise TypeError(f"nn.init.{name}: expected a Parameter, got {type(tensor).__name__}")


def calculate_fan_in_and_fan_out(tensor: nnx.Variable | jax.Array) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight laid out ``[out, in, *receptive_field]``, as torch.

    Example:
        >>> import jax.numpy as jnp, js.nn
        >>> js.nn.init.calculate_fan_in_and_fan_out(jnp.zeros((16, 3, 5, 5)))
        (75, 400)
    """
    shape = _shape("calculate_fan_in_and_fan_out", tensor)
    if len(shape) < 2:
        raise ValueError(
            f"nn.init: fan in and fan out need at least 2 dimensions, got shape {list(shape)}. "
            "Fix: use uniform_/normal_ with explicit bounds for vectors (biases)"
        )
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


_calculate_fan_in_and_fan_out = calculate_fan_in_and_fan_out  # torch's private name, for ports


def _target(name: str, tensor) -> nnx.Variable:
    if not isinstance(tensor, nnx.Variable):
        raise TypeError(
            f"nn.init.{name} writes a Parameter in place; got {type(tensor).__name__}. Fix: pass "
            "the Parameter itself (m.weight or m.weight.data), not its array (m.weight.value)"
        )
    return tensor


def _key(name: str, rngs, seed) -> jax.Array:
    if (rngs is None) == (seed is None):
        got = "both" if rngs is not None else "neither"
        raise ValueError(
            f"nn.init.{name} draws from an explicit random stream: pass exactly one of rngs= "
            f"or seed=, got {got}. Fix: nn.init.{name}(param, ..., rngs=rngs) with "
            "rngs = js.Rngs(params=0), or seed=0 (js has no global generator)"
        )
    if seed is not None:
        rngs = js.Rngs(params=check_int(f"nn.init.{name}", "seed", seed, minimum=None))
    return rngs.next("params")


def _placement(tensor: nnx.Variable) -> tuple[np.dtype, object]:
    current = tensor.get_raw_value()
    # An uncommitted array (the default device's, placed by no one) stays uncommitted.
    placed = not isinstance(current, jax.core.Tracer) and current.committed
    return current.dtype, current.sharding if placed else None


def _write(tensor: nnx.Variable, array: jax.Array) -> nnx.Variable:
    tensor.set_value(array)
    return tensor


def uniform_(
    tensor: nnx.Variable,
    a: float = 0.0,
    b: float = 1.0,
    *,
    rngs: js.Rngs | None = None,
    seed: int | None = None,
) -> nnx.Variable:
    """Fill ``tensor`` with ``U(a, b)``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> w = js.nn.init.uniform_(js.Parameter(jnp.zeros((2, 3))), -1, 1, seed=0)
        >>> bool((abs(w.value) <= 1).all())
        True
    """
    tensor = _target("uniform_", tensor)
    if not a <= b:
        raise ValueError(f"nn.init.uniform_: expected a <= b, got a={a}, b={b}")
    return _uniform("uniform_", tensor, a, b, rngs, seed)


def _uniform(name, tensor, low, high, rngs, seed):
    key = _key(name, rngs, seed)
    dtype, sharding = _placement(tensor)
    shape = _shape(name, tensor)
    return _write(tensor, _random.uniform(key, shape, low, high, dtype, sharding))


def normal_(
    tensor: nnx.Variable,
    mean: float = 0.0,
    std: float = 1.0,
    *,
    rngs: js.Rngs | None = None,
    seed: int | None = None,
) -> nnx.Variable:
    """Fill ``tensor`` with ``N(mean, std^2)``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> rngs = js.Rngs(params=0)
        >>> js.nn.init.normal_(js.Parameter(jnp.zeros((64, 3))), 0.0, 0.02, rngs=rngs).value.shape
        (64, 3)
    """
    tensor = _target("normal_", tensor)
    if not std >= 0:
        raise ValueError(f"nn.init.normal_: expected std >= 0, got std={std}")
    return _normal("normal_", tensor, mean, std, rngs, seed)


def _normal(name, tensor, mean, std, rngs, seed):
    key = _key(name, rngs, seed)
    dtype, sharding = _placement(tensor)
    shape = _shape(name, tensor)
    return _write(tensor, _random.normal(key, shape, mean, std, dtype, sharding))


def trunc_normal_(
    tensor: nnx.Variable,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    *,
    rngs: js.Rngs | None = None,
    seed: int | None = None,
) -> nnx.Variable:
    """Fill ``tensor`` with ``N(mean, std^2)`` conditioned on ``[a, b]``.

    ``a`` and ``b`` are absolute bounds, as in torch (not multiples of ``std``, as in
    ``jax.random.truncated_normal``); torch's inverse-CDF method.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> w = js.nn.init.trunc_normal_(js.Parameter(jnp.zeros(100)), std=0.02, a=-0.04,
        ...                              b=0.04, seed=0)
        >>> bool((abs(w.value) <= 0.04).all())
        True
    """
    tensor = _target("trunc_normal_", tensor)
    if not (std > 0 and a < b):
        raise ValueError(
            f"nn.init.trunc_normal_: expected std > 0 and a < b, got std={std}, a={a}, b={b}"
        )
    key = _key("trunc_normal_", rngs, seed)
    dtype, sharding = _placement(tensor)
    shape = _shape("trunc_normal_", tensor)
    values = _random.truncated_normal(key, shape, mean, std, a, b, dtype, sharding)
    return _write(tensor, values)


def constant_(tensor: nnx.Variable, val: float) -> nnx.Variable:
    """Fill ``tensor`` with ``val``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.init.constant_(js.Parameter(jnp.zeros(2)), 0.5).value.tolist()
        [0.5, 0.5]
    """
    tensor = _target("constant_", tensor)
    dtype, sharding = _placement(tensor)
    return _write(tensor, _random.full(_shape("constant_", tensor), val, dtype, sharding))


def ones_(tensor: nnx.Variable) -> nnx.Variable:
    """Fill ``tensor`` with ones (``constant_(tensor, 1)``)."""
    return constant_(tensor, 1.0)


def zeros_(tensor: nnx.Variable) -> nnx.Variable:
    """Fill ``tensor`` with zeros (``constant_(tensor, 0)``)."""
    return constant_(tensor, 0.0)


def _xavier_std(name: str, tensor, gain: float) -> float:
    fan_in, fan_out = calculate_fan_in_and_fan_out(_target(name, tensor))
    # A zero-element array has nothing to draw (torch: a no-op).
    return gain * math.sqrt(2.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0


def xavier_uniform_(
    tensor: nnx.Variable, gain: float = 1.0, *, rngs: js.Rngs | None = None, seed: int | None = None
) -> nnx.Variable:
    """Fill ``tensor`` with ``U(-a, a)``, ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot).

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> w = js.nn.init.xavier_uniform_(js.Parameter(jnp.zeros((30, 20))), seed=0)
        >>> bool((abs(w.value) <= (6 / 50) ** 0.5).all())
        True
    """
    bound = math.sqrt(3.0) * _xavier_std("xavier_uniform_", tensor, gain)
    return _uniform("xavier_uniform_", tensor, -bound, bound, rngs, seed)


def xavier_normal_(
    tensor: nnx.Variable, gain: float = 1.0, *, rngs: js.Rngs | None = None, seed: int | None = None
) -> nnx.Variable:
    """Fill ``tensor`` with ``N(0, std^2)``, ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    std = _xavier_std("xavier_normal_", tensor, gain)
    return _normal("xavier_normal_", tensor, 0.0, std, rngs, seed)


def _kaiming_std(name: str, tensor, a, mode: str, nonlinearity: str) -> float:
    fan_in, fan_out = calculate_fan_in_and_fan_out(_target(name, tensor))
    if mode.lower() not in ("fan_in", "fan_out"):
        raise ValueError(
            f"nn.init.{name}: mode {mode!r} is not supported; expected 'fan_in' or 'fan_out'"
        )
    fan = fan_in if mode.lower() == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0


def kaiming_uniform_(
    tensor: nnx.Variable,
    a: float = 0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    *,
    rngs: js.Rngs | None = None,
    seed: int | None = None,
) -> nnx.Variable:
    """Fill ``tensor`` with ``U(-b, b)``, ``b = gain * sqrt(3 / fan)`` (He et al., 2015).

    ``gain = calculate_gain(nonlinearity, a)``; ``fan`` is ``fan_in`` or ``fan_out`` (``mode``).
    torch's Linear and conv default is ``kaiming_uniform_(w, a=math.sqrt(5))``, i.e.
    ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``.

    Example:
        >>> import math, jax.numpy as jnp, js, js.nn
        >>> w = js.nn.init.kaiming_uniform_(js.Parameter(jnp.zeros((8, 4))), a=math.sqrt(5),
        ...                                 seed=0)
        >>> bool((abs(w.value) <= 0.5).all())
        True
    """
    std = _kaiming_std("kaiming_uniform_", tensor, a, mode, nonlinearity)
    bound = math.sqrt(3.0) * std
    return _uniform("kaiming_uniform_", tensor, -bound, bound, rngs, seed)


def kaiming_normal_(
    tensor: nnx.Variable,
    a: float = 0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    *,
    rngs: js.Rngs | None = None,
    seed: int | None = None,
) -> nnx.Variable:
    """Fill ``tensor`` with ``N(0, std^2)``, ``std = gain / sqrt(fan)`` (He et al., 2015).

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> w = js.Parameter(jnp.zeros((64, 3, 7, 7)))
        >>> _ = js.nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu", seed=0)
    """
    std = _kaiming_std("kaiming_normal_", tensor, a, mode, nonlinearity)
    return _normal("kaiming_normal_", tensor, 0.0, std, rngs, seed)


def orthogonal_(
    tensor: nnx.Variable, gain: float = 1.0, *, rngs: js.Rngs | None = None, seed: int | None = None
) -> nnx.Variable:
    """Fill ``tensor`` with a (semi-)orthogonal matrix times ``gain`` (Saxe et al., 2013).

    The array is viewed as ``[rows, cols]`` (rows = dimension 0); torch's method: the Q of a
    QR decomposition of a normal matrix, with the signs of R's diagonal folded in.

    Example:
        >>> import jax.numpy as jnp, numpy as np, js, js.nn
        >>> w = js.nn.init.orthogonal_(js.Parameter(jnp.zeros((3, 5))), seed=0).value
        >>> np.allclose(w @ w.T, np.eye(3), atol=1e-6)
        True
    """
    tensor = _target("orthogonal_", tensor)
    shape = _shape("orthogonal_", tensor)
    if len(shape) < 2:
        raise ValueError(
            f"nn.init.orthogonal_: needs at least 2 dimensions, got shape {list(shape)}"
        )
    rows, size = shape[0], math.prod(shape)
    key = _key("orthogonal_", rngs, seed)
    if size == 0:
        return tensor
    cols = size // rows
    flat = _random.standard_normal(key, (rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    dtype, sharding = _placement(tensor)
    values = (gain * q).reshape(shape).astype(dtype)
    return _write(tensor, jax.device_put(values, sharding))
