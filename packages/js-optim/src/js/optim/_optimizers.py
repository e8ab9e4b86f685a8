"""SGD, Adam and AdamW: argument checks around one optax chain each, with torch.optim's rules."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import optax

import js

from ._optimizer import Optimizer
from ._schedules import LearningRate


def _check_lr(owner: str, lr) -> None:
    if callable(lr):
        return
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError(
            f"{owner}: lr must be a float or a schedule (a callable of the step count), got "
            f"{type(lr).__name__}"
        )
    if not float(lr) >= 0:
        raise ValueError(f"{owner}: lr must be >= 0, got {lr!r}")


def _check_non_negative(owner: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) >= 0:
        raise ValueError(f"{owner}: {name} must be a number >= 0, got {value!r}")


def _check_betas(owner: str, betas) -> tuple[float, float]:
    if (
        not isinstance(betas, tuple | list)
        or len(betas) != 2
        or not all(isinstance(b, numbers.Real) and 0 <= float(b) < 1 for b in betas)
    ):
        raise ValueError(f"{owner}: betas must be two numbers in [0, 1), got {betas!r}")
    return float(betas[0]), float(betas[1])


def _bias_correction(decay: float, count: jax.typing.ArrayLike) -> jax.Array:
    """``1 - decay**count`` to the default float's rounding, for the exact double ``decay``.

    optax computes ``1 - decay**count`` with ``decay`` rounded to float32 (0.999 becomes
    0.99900001287): for b2 = 0.999 that is 1.3e-5 relative at step 1 and stays near it for
    thousands of steps, so every Adam step came out ~6e-6 smaller than PyTorch's (which
    computes the correction in double on the host). Here ``log(decay)`` is taken in double
    once, and ``-expm1(count * log(decay))`` loses only float32 rounding.
    """
    log_decay = math.log(decay) if decay > 0 else -math.inf
    dtype = jnp.result_type(float)  # float32, or float64 under jax_enable_x64
    return -jnp.expm1(jnp.asarray(count, dtype) * jnp.asarray(log_decay, dtype))


def scale_by_adam(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """``optax.scale_by_adam`` with PyTorch's bias corrections (see ``_bias_correction``).

    Same state as optax's (``optax.ScaleByAdamState``: count, mu, nu, so the state dict keys
    are unchanged); the first moment is updated in torch's lerp form.
    """
    adam = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)

    def update_fn(updates, state, params=None):
        del params
        # torch's lerp form, m + (1 - b1) (g - m): optax's (1 - b1) g + b1 m, with both
        # weights rounded to float32, sums them to 1 - 2.4e-8 and shrinks m a little each step.
        mu = jax.tree.map(lambda g, m: m + (1 - b1) * (g - m), updates, state.mu)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = optax.safe_increment(state.count)
        correction1, correction2 = _bias_correction(b1, count), _bias_correction(b2, count)

        def scale(m, v):  # m_hat / (sqrt(v_hat) + eps)
            m_hat, v_hat = m / correction1.astype(m.dtype), v / correction2.astype(v.dtype)
            return m_hat / (jnp.sqrt(v_hat) + eps)

        scaled = jax.tree.map(scale, mu, nu)
        nu = optax.tree.cast_like(nu, state.nu)
        return scaled, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(adam.init, update_fn)


def _chain(*named) -> optax.GradientTransformation:
    """``optax.named_chain`` of the entries that are not None (their names key state_dict)."""
    return optax.named_chain(*(entry for entry in named if entry is not None))


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum and Nesterov, as ``torch.optim.SGD``.

    Update rule (``g`` the gradient, ``p`` the parameter, ``b`` the momentum buffer, zero at
    start, ``t`` the step)::

        g = g + weight_decay * p                    # L2 penalty added to the gradient
        b = momentum * b + g                        # when momentum > 0 (dampening 0)
        g = g + momentum * b if nesterov else b
        p = p - lr(t) * g

    optax chain: ``add_decayed_weights(weight_decay)`` -> ``trace(momentum, nesterov)`` ->
    ``scale_by_learning_rate(lr)``. Differences from PyTorch: no ``dampening``, ``maximize``,
    parameter groups or ``.grad`` buffers; ``lr`` may be a schedule. State dict keys:
    ``'step_count'``, ``'momentum.trace.<path>'`` (with momentum), ``'lr.count'`` (with a
    schedule).

    Args:
        params: ``model.parameters()``.
        lr: learning rate >= 0, or a schedule ``step -> lr``, JAX-traceable (``step`` is a
            traced int32: use ``jnp.where`` or optax schedules, not a Python ``if``).
        momentum: momentum factor >= 0 (0 disables it).
        nesterov: use Nesterov momentum (requires ``momentum > 0``).
        weight_decay: L2 penalty >= 0, added to the gradient.

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import SGD
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
        >>> opt.step({"w": jnp.ones(2)})
        >>> [round(x, 4) for x in model.w.value.tolist()], int(opt.step_count)
        ([0.9, 0.9], 1)
    """

    def __init__(
        self,
        params: js.ParameterSelection,
        lr: LearningRate,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
    ) -> None:
        _check_lr("SGD", lr)
        _check_non_negative("SGD", "momentum", momentum)
        _check_non_negative("SGD", "weight_decay", weight_decay)
        if nesterov and momentum == 0:
            raise ValueError("SGD: nesterov=True requires momentum > 0, got momentum=0")
        tx = _chain(
            ("weight_decay", optax.add_decayed_weights(weight_decay)) if weight_decay else None,
            ("momentum", optax.trace(decay=momentum, nesterov=nesterov)) if momentum else None,
            ("lr", optax.scale_by_learning_rate(lr)),
        )
        config = (("lr", lr), ("momentum", momentum), ("nesterov", nesterov))
        config = (*config, ("weight_decay", weight_decay))
        super().__init__(params, tx, config, key=config)


def _adam_checks(owner: str, lr, betas, eps, weight_decay) -> tuple[float, float]:
    _check_lr(owner, lr)
    _check_non_negative(owner, "eps", eps)
    _check_non_negative(owner, "weight_decay", weight_decay)
    return _check_betas(owner, betas)


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam`` (weight decay is an L2 penalty added to the gradient).

    Update rule (``t`` counts from 1; ``m``, ``v`` start at zero)::

        g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        p = p - lr(t - 1) * (m / (1 - b1**t)) / (sqrt(v / (1 - b2**t)) + eps)

    optax chain: ``add_decayed_weights(weight_decay)`` -> ``scale_by_adam(b1, b2, eps)`` ->
    ``scale_by_learning_rate(lr)``, with js's ``scale_by_adam``: its bias corrections are
    accurate to float32 rounding (optax's round ``b2`` to float32 first, a 6e-6 bias per
    step), so results agree with PyTorch's to float32 rounding. No ``amsgrad``, ``maximize``,
    ``foreach`` options. For
    decoupled decay use :class:`AdamW`. State dict keys: ``'step_count'``, ``'adam.count'``,
    ``'adam.mu.<path>'``, ``'adam.nu.<path>'``, ``'lr.count'`` (with a schedule).

    Args:
        params: ``model.parameters()``.
        lr: learning rate >= 0, or a schedule ``step -> lr``, JAX-traceable (``step`` is a
            traced int32: use ``jnp.where`` or optax schedules, not a Python ``if``).
        betas: ``(b1, b2)``, each in ``[0, 1)``.
        eps: added to the denominator, >= 0.
        weight_decay: L2 penalty >= 0, added to the gradient.

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import Adam
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = Adam(model.parameters(), lr=0.1)
        >>> opt.step({"w": jnp.array([1.0, -1.0])})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.9, 1.1]
    """

    def __init__(
        self,
        params: js.ParameterSelection,
        lr: LearningRate = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        b1, b2 = _adam_checks("Adam", lr, betas, eps, weight_decay)
        tx = _chain(
            ("weight_decay", optax.add_decayed_weights(weight_decay)) if weight_decay else None,
            ("adam", scale_by_adam(b1, b2, eps)),
            ("lr", optax.scale_by_learning_rate(lr)),
        )
        config = (("lr", lr), ("betas", (b1, b2)), ("eps", eps), ("weight_decay", weight_decay))
        super().__init__(params, tx, config, key=config)


class AdamW(Optimizer):
    """AdamW (decoupled weight decay), as ``torch.optim.AdamW``.

    Update rule: Adam's step on the raw gradient, plus a decay proportional to the learning
    rate (``lr * weight_decay * p``, not scaled by the Adam denominator)::

        p = p - lr(t - 1) * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)

    optax chain: ``scale_by_adam(b1, b2, eps)`` (js's, as :class:`Adam`) ->
    ``add_decayed_weights(weight_decay)`` -> ``scale_by_learning_rate(lr)``. PyTorch
    multiplies ``p`` by ``1 - lr * weight_decay`` first; the result is the same to float32
    rounding. Note optax's
    own ``adamw`` default decay is 1e-4; this class uses PyTorch's 0.01. State dict keys as
    :class:`Adam`.

    Args:
        params: ``model.parameters()``.
        lr: learning rate >= 0, or a schedule ``step -> lr``, JAX-traceable (``step`` is a
            traced int32: use ``jnp.where`` or optax schedules, not a Python ``if``).
        betas: ``(b1, b2)``, each in ``[0, 1)``.
        eps: added to the denominator, >= 0.
        weight_decay: decoupled decay coefficient >= 0.

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import AdamW
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
        >>> opt.step({"w": jnp.zeros(2)})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.95, 0.95]
    """

    def __init__(
        self,
        params: js.ParameterSelection,
        lr: LearningRate = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ) -> None:
        b1, b2 = _adam_checks("AdamW", lr, betas, eps, weight_decay)
        tx = _chain(
            ("adam", scale_by_adam(b1, b2, eps)),
            ("weight_decay", optax.add_decayed_weights(weight_decay)) if weight_decay else None,
            ("lr", optax.scale_by_learning_rate(lr)),
        )
        config = (("lr", lr), ("betas", (b1, b2)), ("eps", eps), ("weight_decay", weight_decay))
        super().__init__(params, tx, config, key=config)
