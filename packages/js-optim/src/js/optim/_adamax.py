"""Adamax, NAdam and RAdam on the optimizer shell (see ``_more_helpers`` for the shared pieces
and the arithmetic's conventions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from ._more_helpers import (
    Scalars,
    State,
    _betas,
    _bias_correction,
    _flag,
    _float,
    _l2,
    _lerp,
    _log,
    _number,
    _rho_minus_k,
)
from ._optimizer import Optimizer
from ._schedules import LearningRate


class Adamax(Optimizer):
    """Adamax (Adam with the infinity norm), as ``torch.optim.Adamax``.

    Update rule (``t`` the step, from 1; ``m``, ``u`` start at zero)::

        g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        u = max(b2 * u, |g| + eps)
        p = p - lr / (1 - b1**t) * m / u

    Same arithmetic as torch's single-tensor path; the bias correction is computed in float32
    as ``-expm1(t * log(b1))`` (torch: in double on the host), within float32 rounding of it.
    No ``capturable``, ``foreach``. State keys ``'adamax.exp_avg.<path>'``,
    ``'adamax.exp_inf.<path>'``.

    Args:
        params: ``model.parameters()``, or a list of parameter-group dicts.
        lr: learning rate >= 0, or a schedule ``step -> lr``.
        betas: ``(b1, b2)``, each in [0, 1).
        eps: added to ``|g|``, >= 0.
        weight_decay: L2 penalty >= 0, added to the gradient.
        maximize: ascend the objective instead of descending it (static).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import Adamax
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = Adamax(model.parameters(), lr=0.1)
        >>> opt.step({"w": jnp.array([1.0, -1.0])})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.9, 1.1]
    """

    name = "adamax"
    static = ("maximize",)

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults | dict(maximize=maximize))

    def check(self, group: Mapping[str, Any]) -> None:
        """Refuse a group's bad options (names the option, the value and the range)."""
        _betas(group["betas"])
        _number("eps", group["eps"], 0.0)
        _number("weight_decay", group["weight_decay"], 0.0)
        _flag("maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host."""
        b1, b2 = (float(b) for b in group["betas"])
        return dict(
            one_minus_b1=1 - b1,
            b2=b2,
            log_b1=_log(b1),
            eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]),
        )

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> State:
        """``exp_avg`` (first moment) and ``exp_inf`` (decayed infinity norm)."""
        return {"exp_avg": jnp.zeros_like(param), "exp_inf": jnp.zeros_like(param)}

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: State,
        h: Scalars,
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, State]:
        """One step of one parameter (torch's ``_single_tensor_adamax``)."""
        grad = -grad if group["maximize"] else grad
        g = _l2(grad, param, h)
        exp_avg = _lerp(state["exp_avg"], g, h["one_minus_b1"])
        exp_inf = jnp.maximum(state["exp_inf"] * h["b2"], jnp.abs(g) + h["eps"])
        clr = h["lr"] / _bias_correction(h["log_b1"], _float(step))
        new = {"exp_avg": exp_avg, "exp_inf": exp_inf}
        return param + -clr * exp_avg / exp_inf, new


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
        _betas(group["betas"])
        _number("eps", group["eps"], 0.0)
        _number("weight_decay", group["weight_decay"], 0.0)
        _number("momentum_decay", group["momentum_decay"], 0.0)
        _flag("decoupled_weight_decay", group["decoupled_weight_decay"])
        _flag("maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host."""
        b1, b2 = (float(b) for b in group["betas"])
        return dict(
            b1=b1,
            one_minus_b1=1 - b1,
            b2=b2,
            one_minus_b2=1 - b2,
            log_b2=_log(b2),
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
        t = _float(step)
        bias_correction2 = _bias_correction(h["log_b2"], t)
        if group["decoupled_weight_decay"]:
            p, g = param * (1 - h["lr"] * h["weight_decay"]), grad
        else:
            p, g = param, _l2(grad, param, h)
        mu = h["b1"] * (1 - 0.5 * jnp.exp(t * h["psi_log"]))
        mu_next = h["b1"] * (1 - 0.5 * jnp.exp((t + 1) * h["psi_log"]))
        mu_product = state["mu_product"] * mu
        exp_avg = _lerp(state["exp_avg"], g, h["one_minus_b1"])
        exp_avg_sq = state["exp_avg_sq"] * h["b2"] + h["one_minus_b2"] * g * g
        denom = jnp.sqrt(exp_avg_sq / bias_correction2) + h["eps"]
        lr = h["lr"]
        p = p + (-lr * (1 - mu) / (1 - mu_product)) * g / denom
        p = p + ((-lr * mu_next) / (1 - mu_product * mu_next)) * exp_avg / denom
        new = {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq, "mu_product": mu_product}
        return p, new


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
        _betas(group["betas"])
        _number("eps", group["eps"], 0.0)
        _number("weight_decay", group["weight_decay"], 0.0)
        _flag("decoupled_weight_decay", group["decoupled_weight_decay"])
        _flag("maximize", group["maximize"])

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
            log_b1=_log(b1),
            log_b2=_log(b2),
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
        t = _float(step)
        if group["decoupled_weight_decay"]:
            p, g = param * (1 - h["lr"] * h["weight_decay"]), grad
        else:
            p, g = param, _l2(grad, param, h)
        exp_avg = _lerp(state["exp_avg"], g, h["one_minus_b1"])
        exp_avg_sq = state["exp_avg_sq"] * h["b2"] + h["one_minus_b2"] * g * g
        corrected = exp_avg / _bias_correction(h["log_b1"], t)
        rho_t = h["rho_k"] + _rho_minus_k(t, h["neg_log_b2"])
        rectified = (h["rectify"] > 0) & (rho_t > 5)
        safe_rho = jnp.where(rectified, rho_t, 5.0)  # no NaN from sqrt below in the other branch
        rect = jnp.sqrt((safe_rho - 4) * (safe_rho - 2) * h["rect_scale"] / safe_rho)
        adaptive = jnp.sqrt(_bias_correction(h["log_b2"], t)) / (jnp.sqrt(exp_avg_sq) + h["eps"])
        step_ = jnp.where(rectified, corrected * h["lr"] * adaptive * rect, corrected * h["lr"])
        new = {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        return p + -1.0 * step_, new
