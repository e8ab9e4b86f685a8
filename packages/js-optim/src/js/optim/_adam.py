"""``Adam`` and ``AdamW`` (Adam with decoupled weight decay), as ``torch.optim``'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from js._checks import check_bool, check_number, check_pair

from ._arithmetic import (
    bias_correction,
    log_or_inf,
)
from ._optimizer import Optimizer
from ._schedules import LearningRate


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
        check_pair("", "betas", group["betas"], 0, 1, open_high=True)
        check_number("", "eps", group["eps"], 0)
        check_number("", "weight_decay", group["weight_decay"], 0)
        check_bool("", "amsgrad", group["amsgrad"])
        check_bool("", "maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """``1 - b1``, ``b2``, ``1 - b2``, ``log(b1)``, ``log(b2)``, eps, weight_decay, in
        double."""
        b1, b2 = check_pair("", "betas", group["betas"], 0, 1, open_high=True)
        return {
            "one_minus_b1": 1.0 - b1,
            "b2": b2,
            "one_minus_b2": 1.0 - b2,
            "log_b1": log_or_inf(b1),
            "log_b2": log_or_inf(b2),
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
        m_hat = mu / bias_correction(h["log_b1"], step)
        v_hat = nu / bias_correction(h["log_b2"], step)
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
