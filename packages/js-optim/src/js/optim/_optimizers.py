"""SGD, Adam and AdamW on the optimizer shell, with torch.optim's rules and numbers."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from ._optimizer import Optimizer
from ._schedules import LearningRate


def _check_non_negative(owner: str, name: str, value) -> None:
    """A number >= 0 (``owner`` prefixes the message when given)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) >= 0:
        prefix = f"{owner}: " if owner else ""
        raise ValueError(f"{prefix}{name} must be a number >= 0, got {value!r}")


def _check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def _check_betas(betas) -> tuple[float, float]:
    if (
        not isinstance(betas, tuple | list)
        or len(betas) != 2
        or not all(
            isinstance(b, numbers.Real) and not isinstance(b, bool) and 0 <= float(b) < 1
            for b in betas
        )
    ):
        raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
    return float(betas[0]), float(betas[1])


def _log(decay: float) -> float:
    """``log(decay)`` in double (``-inf`` for 0: the correction ``-expm1(t log b)`` is then 1)."""
    return math.log(decay) if decay > 0 else -math.inf


def _bias_correction(log_decay: jax.Array, step: jax.Array) -> jax.Array:
    """``1 - decay**step`` to float32 rounding: ``-expm1(step * log(decay))``, ``log(decay)``
    taken in double on the host (optax rounds ``decay`` to float32 first: for b2 = 0.999 a
    1.3e-5 relative error at step 1 that stays for thousands of steps, so every Adam step came
    out ~6e-6 smaller than PyTorch's, which computes the correction in double)."""
    return -jnp.expm1(step.astype(log_decay.dtype) * log_decay)


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening and Nesterov, as
    ``torch.optim.SGD``.

    Update rule (``g`` the gradient, ``p`` the parameter, ``b`` the momentum buffer, ``t`` the
    step from 1)::

        g = -g if maximize else g
        g = g + weight_decay * p                    # L2 penalty added to the gradient
        b = g if t == 1 else momentum * b + (1 - dampening) * g   # when momentum != 0
        g = g + momentum * b if nesterov else b
        p = p - lr * g

    Differences from PyTorch: no ``.grad`` buffers (``step(grads)``); ``lr`` may be a schedule.
    A group built with ``momentum=0`` keeps no buffer, so its momentum cannot be written to a
    nonzero value later (build it with a momentum). State dict keys: ``'step_count'``,
    ``'momentum.trace.<path>'`` (with momentum), ``'param_groups.<i>.<option>'`` for ``lr``,
    ``momentum``, ``dampening``, ``weight_decay``.

    Args:
        params: ``model.parameters()`` or a list of parameter groups (see ``Optimizer``).
        lr: learning rate >= 0, or a schedule ``step -> lr``, JAX-traceable (``step`` is a
            traced int32: use ``jnp.where`` or optax schedules, not a Python ``if``).
        momentum: momentum factor >= 0 (0 disables it).
        dampening: dampening of the momentum, >= 0.
        weight_decay: L2 penalty >= 0, added to the gradient.
        nesterov: use Nesterov momentum (requires ``momentum > 0`` and ``dampening == 0``).
        maximize: ascend the objective instead of descending it.

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

    name = "momentum"
    static = ("nesterov", "maximize")

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        if isinstance(dampening, bool) or isinstance(weight_decay, bool):
            # js-optim 0.1's order was (params, lr, momentum, nesterov, weight_decay)
            raise TypeError(
                "SGD: got a bool where torch's order puts dampening or weight_decay; since "
                "js-optim 0.2 SGD's arguments are (params, lr, momentum, dampening, "
                "weight_decay, nesterov), as torch.optim.SGD's. Fix: pass them by keyword, "
                "SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)."
            )
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def check(self, group: Mapping[str, Any]) -> None:
        """momentum, dampening, weight_decay >= 0; nesterov needs momentum and no dampening."""
        for name in ("momentum", "dampening", "weight_decay"):
            _check_non_negative("", name, group[name])
        _check_bool("nesterov", group["nesterov"])
        _check_bool("maximize", group["maximize"])
        if group["nesterov"] and (group["momentum"] == 0 or group["dampening"] != 0):
            raise ValueError(
                "nesterov=True requires momentum > 0 and dampening = 0, got "
                f"momentum={group['momentum']!r}, dampening={group['dampening']!r}"
            )

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """momentum, 1 - dampening and weight_decay, in double."""
        return {
            "momentum": float(group["momentum"]),
            "one_minus_dampening": 1.0 - float(group["dampening"]),
            "weight_decay": float(group["weight_decay"]),
        }

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> dict[str, jax.Array]:
        """A zero momentum buffer ``trace`` when the group's momentum is not 0."""
        return {"trace": jnp.zeros_like(param)} if group["momentum"] != 0 else {}

    def flags(self, group: Mapping[str, Any]) -> dict[str, Any]:
        """Terms left out of the program while their option is 0, as torch skips them."""
        return {"decay": group["weight_decay"] != 0, "dampened": group["dampening"] != 0}

    def update(self, param, grad, state, h, step, group):
        """torch's SGD step for one parameter."""
        g = -grad if group["maximize"] else grad
        if group["decay"]:
            g = g + h["weight_decay"] * param
        if "trace" in state:
            momentum = h["momentum"]
            dampened = h["one_minus_dampening"] * g if group["dampened"] else g
            buffer = jnp.where(step == 1, g, dampened + momentum * state["trace"])
            state = {"trace": buffer}
            g = g + momentum * buffer if group["nesterov"] else buffer
        return param - h["lr"] * g, state


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam`` (weight decay is an L2 penalty added to the gradient).

    Update rule (``t`` counts from 1; ``m``, ``v`` start at zero)::

        g = -g if maximize else g
        g = g + weight_decay * p
        m = m + (1 - b1) * (g - m)                  # torch's lerp
        v = b2 * v + (1 - b2) * g**2
        v_max = max(v_max, v)                       # amsgrad: v_max replaces v below
        p = p - lr * (m / (1 - b1**t)) / (sqrt(v / (1 - b2**t)) + eps)

    The bias corrections are ``-expm1(t * log(b))`` with ``log(b)`` taken in double on the
    host, accurate to float32 rounding, so results agree with PyTorch's to float32 rounding.
    No ``foreach``/``fused``/``capturable``/``differentiable`` (compilation does that). For
    decoupled decay use :class:`AdamW`. State dict keys: ``'step_count'``, ``'adam.mu.<path>'``,
    ``'adam.nu.<path>'``, ``'adam.nu_max.<path>'`` (amsgrad), ``'param_groups.<i>.<option>'``
    for ``lr``, ``betas``, ``eps``, ``weight_decay``.

    Args:
        params: ``model.parameters()`` or a list of parameter groups (see ``Optimizer``).
        lr: learning rate >= 0, or a schedule ``step -> lr``, JAX-traceable (``step`` is a
            traced int32: use ``jnp.where`` or optax schedules, not a Python ``if``).
        betas: ``(b1, b2)``, each in ``[0, 1)``.
        eps: added to the denominator, >= 0.
        weight_decay: L2 penalty >= 0, added to the gradient.
        amsgrad: use the running maximum of ``v`` (static).
        maximize: ascend the objective instead of descending it (static).

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

    name = "adam"
    static = ("amsgrad", "maximize")
    _decoupled = False

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def check(self, group: Mapping[str, Any]) -> None:
        """betas in [0, 1); eps, weight_decay >= 0; amsgrad, maximize bools."""
        _check_betas(group["betas"])
        _check_non_negative("", "eps", group["eps"])
        _check_non_negative("", "weight_decay", group["weight_decay"])
        _check_bool("amsgrad", group["amsgrad"])
        _check_bool("maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """``1 - b1``, ``b2``, ``1 - b2``, ``log(b1)``, ``log(b2)``, eps, weight_decay, in
        double."""
        b1, b2 = _check_betas(group["betas"])
        return {
            "one_minus_b1": 1.0 - b1,
            "b2": b2,
            "one_minus_b2": 1.0 - b2,
            "log_b1": _log(b1),
            "log_b2": _log(b2),
            "eps": float(group["eps"]),
            "weight_decay": float(group["weight_decay"]),
        }

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> dict[str, jax.Array]:
        """Zero moments ``mu``, ``nu`` (and ``nu_max`` with amsgrad)."""
        state = {"mu": jnp.zeros_like(param), "nu": jnp.zeros_like(param)}
        if group["amsgrad"]:
            state["nu_max"] = jnp.zeros_like(param)
        return state

    def flags(self, group: Mapping[str, Any]) -> dict[str, Any]:
        """The decay term is left out of the program while weight_decay is 0, as torch does."""
        return {"decay": group["weight_decay"] != 0}

    def update(self, param, grad, state, h, step, group):
        """torch's Adam (or AdamW) step for one parameter."""
        g = -grad if group["maximize"] else grad
        decay = group["decay"]
        if decay and not self._decoupled:
            g = g + h["weight_decay"] * param
        # torch's lerp form, m + (1 - b1) (g - m): optax's (1 - b1) g + b1 m, with both
        # weights rounded to float32, sums them to 1 - 2.4e-8 and shrinks m a little each step.
        mu = state["mu"] + h["one_minus_b1"] * (g - state["mu"])
        nu = h["one_minus_b2"] * (g * g) + h["b2"] * state["nu"]
        new = {"mu": mu, "nu": nu}
        if "nu_max" in state:
            nu = new["nu_max"] = jnp.maximum(state["nu_max"], nu)
        m_hat = mu / _bias_correction(h["log_b1"], step)
        v_hat = nu / _bias_correction(h["log_b2"], step)
        u = m_hat / (jnp.sqrt(v_hat) + h["eps"])
        if decay and self._decoupled:
            u = u + h["weight_decay"] * param
        return param - h["lr"] * u, new


class AdamW(Adam):
    """AdamW (decoupled weight decay), as ``torch.optim.AdamW``.

    Update rule: Adam's step on the raw gradient, plus a decay proportional to the learning
    rate (``lr * weight_decay * p``, not scaled by the Adam denominator)::

        p = p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)

    PyTorch multiplies ``p`` by ``1 - lr * weight_decay`` first; the result is the same to
    float32 rounding. Note optax's own ``adamw`` default decay is 1e-4; this class uses
    PyTorch's 0.01. Options, state dict keys and the rest as :class:`Adam`.

    Args:
        params: ``model.parameters()`` or a list of parameter groups (see ``Optimizer``).
        lr: learning rate >= 0, or a schedule ``step -> lr``, JAX-traceable.
        betas: ``(b1, b2)``, each in ``[0, 1)``.
        eps: added to the denominator, >= 0.
        weight_decay: decoupled decay coefficient >= 0.
        amsgrad: use the running maximum of ``v`` (static).
        maximize: ascend the objective instead of descending it (static).

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

    _decoupled = True

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
