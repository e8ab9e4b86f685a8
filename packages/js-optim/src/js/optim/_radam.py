"""``RAdam`` (rectified Adam), as ``torch.optim.RAdam``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from js._checks import check_bool, check_number, check_pair

from ._arithmetic import (
    Scalars,
    State,
    adam_moments,
    as_float,
    bias_correction,
    decayed,
    log_or_inf,
    rho_minus_k,
)
from ._optimizer import Optimizer
from ._schedules import LearningRate


class RAdam(Optimizer):
    """RAdam (rectified Adam), as ``torch.optim.RAdam``.

    Update rule (``t`` the step, from 1; ``m``, ``v`` start at zero)::

        g = g + weight_decay * p                  # or p = p * (1 - lr * weight_decay), decoupled
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * b2**t / (1 - b2**t)
        r = sqrt((rho_t - 4) (rho_t - 2) rho_inf / ((rho_inf - 4) (rho_inf - 2) rho_t))
        p = p - lr * m / (1 - b1**t) * sqrt(1 - b2**t) / (sqrt(v) + eps) * r   if rho_t > 5
        p = p - lr * m / (1 - b1**t)                                          otherwise

    Same arithmetic as torch's single-tensor path (the branch is a ``jnp.where`` on the traced
    step). torch computes ``rho_t`` in double on the host; in float32 its two terms (near
    ``rho_inf``, 1999 for b2 = 0.999) cancel, so js computes ``rho_t - K`` (``K`` a host
    constant) as ``t * (2/u - 2/expm1(u))``, ``u = -t log(b2)``, by its series below u = 1:
    within float32 rounding of torch's. No ``capturable``, ``foreach``. State
    keys ``'radam.exp_avg.<path>'``, ``'radam.exp_avg_sq.<path>'``.

    Args:
        params: ``model.parameters()``, or a list of parameter-group dicts.
        lr: learning rate >= 0, or a schedule ``step -> lr``.
        betas: ``(b1, b2)``, each in [0, 1).
        eps: added to the denominator, >= 0.
        weight_decay: weight decay >= 0: an L2 penalty added to the gradient, or with
            ``decoupled_weight_decay=True`` AdamW's decay of the parameter.
        decoupled_weight_decay: decay the parameter directly instead of the gradient.
        maximize: ascend the objective instead of descending it (static).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import RAdam
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = RAdam(model.parameters(), lr=0.1)
        >>> opt.step({"w": jnp.array([1.0, -1.0])})  # rho_1 = 1 <= 5: a plain momentum step
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.9, 1.1]
    """

    name = "radam"
    static = ("decoupled_weight_decay", "maximize")

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        defaults |= dict(decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults | dict(maximize=maximize))

    def check(self, group: Mapping[str, Any]) -> None:
        """Refuse a group's bad options (names the option, the value and the range)."""
        check_pair("", "betas", group["betas"], 0, 1, open_high=True)
        check_number("", "eps", group["eps"], 0)
        check_number("", "weight_decay", group["weight_decay"], 0)
        check_bool("", "decoupled_weight_decay", group["decoupled_weight_decay"])
        check_bool("", "maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host; ``rho_t = rho_k + t * q(u)``."""
        b1, b2 = (float(b) for b in group["betas"])
        rho_inf = 2 / (1 - b2) - 1
        rectify = rho_inf > 5  # else rho_t <= rho_inf <= 5 at every step: never rectified
        neg_log_b2 = -math.log(b2) if rectify else 1.0
        return dict(
            one_minus_b1=1 - b1,
            b2=b2,
            one_minus_b2=1 - b2,
            log_b1=log_or_inf(b1),
            log_b2=log_or_inf(b2),
            eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]),
            neg_log_b2=neg_log_b2,
            rectify=float(rectify),
            rho_k=rho_inf - 2 / neg_log_b2 if rectify else 0.0,
            rect_scale=rho_inf / ((rho_inf - 4) * (rho_inf - 2)) if rectify else 0.0,
        )

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> State:
        """``exp_avg`` and ``exp_avg_sq``, Adam's moments."""
        return {"exp_avg": jnp.zeros_like(param), "exp_avg_sq": jnp.zeros_like(param)}

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: State,
        h: Scalars,
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, State]:
        """One step of one parameter (torch's ``_single_tensor_radam``)."""
        grad = -grad if group["maximize"] else grad
        t = as_float(step)
        p, g = decayed(param, grad, h, group["decoupled_weight_decay"])
        exp_avg, exp_avg_sq = adam_moments(state, g, h)
        corrected = exp_avg / bias_correction(h["log_b1"], t)
        rho_t = h["rho_k"] + rho_minus_k(t, h["neg_log_b2"])
        rectified = (h["rectify"] > 0) & (rho_t > 5)
        safe_rho = jnp.where(rectified, rho_t, 5.0)  # no NaN from sqrt below in the other branch
        rect = jnp.sqrt((safe_rho - 4) * (safe_rho - 2) * h["rect_scale"] / safe_rho)
        adaptive = jnp.sqrt(bias_correction(h["log_b2"], t)) / (jnp.sqrt(exp_avg_sq) + h["eps"])
        step_ = jnp.where(rectified, corrected * h["lr"] * adaptive * rect, corrected * h["lr"])
        new = {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        return p + -1.0 * step_, new
