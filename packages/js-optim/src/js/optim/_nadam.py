"""``NAdam`` (Adam with Nesterov momentum), as ``torch.optim.NAdam``."""

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
)
from ._optimizer import Optimizer
from ._schedules import LearningRate


class NAdam(Optimizer):
    """NAdam (Adam with Nesterov momentum), as ``torch.optim.NAdam``.

    Update rule (``t`` the step, from 1; ``m``, ``v`` start at zero, ``P`` at one)::

        g = g + weight_decay * p                  # or p = p * (1 - lr * weight_decay), decoupled
        mu_t = b1 * (1 - 0.5 * 0.96**(t * momentum_decay))
        P = P * mu_t                              # the per-parameter mu_product
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        d = sqrt(v / (1 - b2**t)) + eps
        p = p - lr * (1 - mu_t) / (1 - P) * g / d - lr * mu_(t+1) / (1 - P * mu_(t+1)) * m / d

    Same arithmetic as torch's single-tensor path; torch computes ``mu_t``, ``mu_(t+1)`` and
    the bias correction in double on the host, js in float32 from host-computed logarithms,
    within float32 rounding of them. No ``capturable``, ``foreach``. State keys
    ``'nadam.exp_avg.<path>'``, ``'nadam.exp_avg_sq.<path>'``, ``'nadam.mu_product.<path>'``
    (a float32 scalar per parameter, as torch's).

    Args:
        params: ``model.parameters()``, or a list of parameter-group dicts.
        lr: learning rate >= 0, or a schedule ``step -> lr``.
        betas: ``(b1, b2)``, each in [0, 1).
        eps: added to the denominator, >= 0.
        weight_decay: weight decay >= 0: an L2 penalty added to the gradient, or with
            ``decoupled_weight_decay=True`` AdamW's decay of the parameter (NAdamW).
        momentum_decay: the ``psi`` of the momentum schedule, >= 0.
        decoupled_weight_decay: decay the parameter directly instead of the gradient.
        maximize: ascend the objective instead of descending it (static).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import NAdam
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = NAdam(model.parameters(), lr=0.1)
        >>> opt.step({"w": jnp.array([1.0, -1.0])})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.8944, 1.1056]
    """

    name = "nadam"
    static = ("decoupled_weight_decay", "maximize")

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        defaults |= dict(momentum_decay=momentum_decay)
        defaults |= dict(decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults | dict(maximize=maximize))

    def check(self, group: Mapping[str, Any]) -> None:
        """Refuse a group's bad options (names the option, the value and the range)."""
        check_pair("", "betas", group["betas"], 0, 1, open_high=True)
        check_number("", "eps", group["eps"], 0)
        check_number("", "weight_decay", group["weight_decay"], 0)
        check_number("", "momentum_decay", group["momentum_decay"], 0)
        check_bool("", "decoupled_weight_decay", group["decoupled_weight_decay"])
        check_bool("", "maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host."""
        b1, b2 = (float(b) for b in group["betas"])
        return dict(
            b1=b1,
            one_minus_b1=1 - b1,
            b2=b2,
            one_minus_b2=1 - b2,
            log_b2=log_or_inf(b2),
            eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]),
            # 0.96**(t * momentum_decay) = exp(t * psi_log): the exponent's factor in double
            psi_log=float(group["momentum_decay"]) * math.log(0.96),
        )

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> State:
        """``exp_avg``, ``exp_avg_sq`` and ``mu_product`` (a float32 scalar, starts at 1)."""
        zeros = jnp.zeros_like(param)
        return {"exp_avg": zeros, "exp_avg_sq": zeros, "mu_product": jnp.ones((), jnp.float32)}

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: State,
        h: Scalars,
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, State]:
        """One step of one parameter (torch's ``_single_tensor_nadam``)."""
        grad = -grad if group["maximize"] else grad
        t = as_float(step)
        bias_correction2 = bias_correction(h["log_b2"], t)
        p, g = decayed(param, grad, h, group["decoupled_weight_decay"])
        mu = h["b1"] * (1 - 0.5 * jnp.exp(t * h["psi_log"]))
        mu_next = h["b1"] * (1 - 0.5 * jnp.exp((t + 1) * h["psi_log"]))
        mu_product = state["mu_product"] * mu
        exp_avg, exp_avg_sq = adam_moments(state, g, h)
        denom = jnp.sqrt(exp_avg_sq / bias_correction2) + h["eps"]
        lr = h["lr"]
        p = p + (-lr * (1 - mu) / (1 - mu_product)) * g / denom
        p = p + ((-lr * mu_next) / (1 - mu_product * mu_next)) * exp_avg / denom
        new = {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq, "mu_product": mu_product}
        return p, new
