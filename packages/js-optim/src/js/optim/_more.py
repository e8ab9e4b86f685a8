"""RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Adafactor and Lion on the optimizer shell.

Each class gives the shell four pieces (see ``Optimizer``): ``check(group)`` validates a
group's options, ``scalars(group)`` turns them into the float scalars the update reads
(computed on the host in double precision), ``init(param, group)`` makes a parameter's state
fields and ``update(param, grad, state, h, step, group)`` is the pure per-parameter step.

The arithmetic follows torch 2.13's single-tensor code paths (``_single_tensor_rmsprop`` and
its kin in ``torch/optim/*.py``) operation by operation, in the same order, so results agree
with PyTorch's to float32 rounding. Where torch computes a scalar from the step count in double
on the host (bias corrections, NAdam's momentum schedule, RAdam's rectification), the update
computes it in float32 from host-computed logarithms, in forms that lose only float32 rounding
(``-expm1(t * log(b))`` for ``1 - b**t``; RAdam's ``rho_t`` without its cancellation).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from ._optimizer import Optimizer
from ._schedules import LearningRate

Scalars = dict[str, jax.Array]
State = dict[str, jax.Array]


# ----------------------------------------------------------------------------------------------
# Checks (host side, before anything is built or written)


def _number(name: str, value, low: float, high: float | None = None, *, closed: bool = True):
    """``value`` as a float when it is a real number in ``[low, high]`` (``[low, high)`` when
    ``closed`` is False); TypeError for a bool or non-number, ValueError outside the range."""
    span = f">= {low}" if high is None else f"in [{low}, {high}{']' if closed else ')'}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number {span}, got {value!r} (a {type(value).__name__})")
    x = float(value)
    ok = x >= low and (high is None or (x <= high if closed else x < high))
    if not ok:
        raise ValueError(f"{name} must be a number {span}, got {value!r}")
    return x


def _betas(betas) -> tuple[float, float]:
    if not isinstance(betas, tuple | list) or len(betas) != 2:
        raise TypeError(f"betas must be a pair (b1, b2), got {betas!r}. Fix: betas=(0.9, 0.999)")
    b1 = _number("betas[0]", betas[0], 0.0, 1.0, closed=False)
    return b1, _number("betas[1]", betas[1], 0.0, 1.0, closed=False)


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be True or False, got {value!r} (a {type(value).__name__}). Fix: "
            f"{name}=True or {name}=False"
        )
    return value


def _auto(eps1) -> bool:
    """Adafactor's ``eps1=None`` (the dtype's epsilon); NaN is how a state dict stores None."""
    return eps1 is None or (isinstance(eps1, float) and math.isnan(eps1))


def _log(b: float) -> float:
    """``log(b)`` in double; ``-inf`` for 0 (then ``1 - b**t`` is 1)."""
    return math.log(b) if b > 0 else -math.inf


# ----------------------------------------------------------------------------------------------
# Shared pieces of the per-parameter math (pure jnp)


def _float(step: jax.Array) -> jax.Array:
    return jnp.asarray(step, jnp.result_type(float))


def _one_minus_pow(log_b: jax.Array, t: jax.Array) -> jax.Array:
    """``1 - b**t`` to float32 rounding, from ``log(b)`` (taken in double on the host)."""
    return -jnp.expm1(t * log_b)


def _lerp(start: jax.Array, end: jax.Array, weight: jax.Array) -> jax.Array:
    """``torch.lerp``'s two formulas (ATen ``lerp``): exact at both ends of the weight."""
    diff = end - start
    return jnp.where(weight < 0.5, start + weight * diff, end - diff * (1 - weight))


def _l2(grad: jax.Array, param: jax.Array, h: Scalars) -> jax.Array:
    """``grad + weight_decay * param`` (torch adds it only when weight_decay != 0: the same)."""
    return grad + h["weight_decay"] * param


def _rho_minus_k(t: jax.Array, neg_log_b2: jax.Array) -> jax.Array:
    """``rho_t - K`` of RAdam (see ``RAdam.scalars``), as ``t * (2/u - 2/expm1(u))`` with
    ``u = -t log(b2)``: a series below u = 1, where the difference cancels in float32."""
    u = t * neg_log_b2
    s = jnp.minimum(u, 1.0)  # the series part: 2/u - 2/expm1(u) = 1 - sum_k 2 B_2k s^(2k-1)/(2k)!
    s2 = s * s
    series = 1 - s * (1 / 6 - s2 * (1 / 360 - s2 * (1 / 15120 - s2 * (1 / 604800 - s2 / 23950080))))
    direct = 2 / u - 2 / jnp.expm1(u)
    return t * jnp.where(u < 1, series, direct)


# ----------------------------------------------------------------------------------------------
# The optimizers


class RMSprop(Optimizer):
    """RMSprop, as ``torch.optim.RMSprop`` (Hinton's running average of squared gradients).

    Update rule (``g`` the gradient, ``p`` the parameter; ``v``, ``a``, ``b`` start at zero)::

        g = g + weight_decay * p
        v = alpha * v + (1 - alpha) * g**2
        a = a + (1 - alpha) * (g - a)                 # centered only
        d = sqrt(v - a**2 if centered else v) + eps
        b = momentum * b + g / d                      # when momentum > 0 at construction
        p = p - lr * (b if momentum > 0 else g / d)

    Same arithmetic as torch's single-tensor path, so results agree to float32 rounding. No
    ``capturable``, ``foreach`` options. State keys ``'rmsprop.square_avg.<path>'``,
    ``'rmsprop.grad_avg.<path>'`` (centered), ``'rmsprop.momentum_buffer.<path>'`` (momentum).

    Args:
        params: ``model.parameters()``, or a list of parameter-group dicts.
        lr: learning rate >= 0, or a schedule ``step -> lr``.
        alpha: smoothing constant in [0, 1].
        eps: added to the denominator, >= 0.
        weight_decay: L2 penalty >= 0, added to the gradient.
        momentum: momentum factor >= 0. A group built with 0 keeps no momentum buffer, so
            giving it momentum later is refused (as in torch, where it would fail).
        centered: normalize by the variance estimate (``v - a**2``) instead of ``v``.
        maximize: ascend the objective instead of descending it (static).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import RMSprop
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = RMSprop(model.parameters(), lr=0.01)
        >>> opt.step({"w": jnp.array([1.0, -1.0])})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.9, 1.1]
    """

    name = "rmsprop"
    static = ("centered", "maximize")

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)
        defaults |= dict(momentum=momentum, centered=centered)
        super().__init__(params, defaults | dict(maximize=maximize))

    def check(self, group: Mapping[str, Any]) -> None:
        """Refuse a group's bad options (names the option, the value and the range)."""
        _number("alpha", group["alpha"], 0.0, 1.0)
        _number("eps", group["eps"], 0.0)
        _number("weight_decay", group["weight_decay"], 0.0)
        _number("momentum", group["momentum"], 0.0)
        _flag("centered", group["centered"])
        _flag("maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host."""
        alpha = float(group["alpha"])
        return dict(
            alpha=alpha,
            one_minus_alpha=1 - alpha,
            eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]),
            momentum=float(group["momentum"]),
        )

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> State:
        """``square_avg`` (and ``grad_avg`` when centered, ``momentum_buffer`` with momentum)."""
        state = {"square_avg": jnp.zeros_like(param)}
        if group["centered"]:
            state["grad_avg"] = jnp.zeros_like(param)
        if group["momentum"] > 0:
            state["momentum_buffer"] = jnp.zeros_like(param)
        return state

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: State,
        h: Scalars,
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, State]:
        """One step of one parameter (torch's ``_single_tensor_rmsprop``)."""
        grad = -grad if group["maximize"] else grad
        g = _l2(grad, param, h)
        new = {"square_avg": state["square_avg"] * h["alpha"] + h["one_minus_alpha"] * g * g}
        if group["centered"]:
            new["grad_avg"] = _lerp(state["grad_avg"], g, h["one_minus_alpha"])
            avg = jnp.sqrt(new["square_avg"] - new["grad_avg"] * new["grad_avg"]) + h["eps"]
        else:
            avg = jnp.sqrt(new["square_avg"]) + h["eps"]
        if "momentum_buffer" in state:
            new["momentum_buffer"] = state["momentum_buffer"] * h["momentum"] + g / avg
            return param + -h["lr"] * new["momentum_buffer"], new
        return param + -h["lr"] * g / avg, new


class Adagrad(Optimizer):
    """Adagrad, as ``torch.optim.Adagrad`` (dense gradients).

    Update rule (``t`` the step, from 1; ``s`` starts at ``initial_accumulator_value``)::

        g = g + weight_decay * p
        s = s + g**2
        p = p - lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps)

    Same arithmetic as torch's single-tensor path, so results agree to float32 rounding. No
    sparse gradients, ``foreach``, ``fused``. State key ``'adagrad.sum.<path>'``.

    Args:
        params: ``model.parameters()``, or a list of parameter-group dicts.
        lr: learning rate >= 0, or a schedule ``step -> lr`` (``lr_decay`` still applies).
        lr_decay: learning-rate decay >= 0.
        weight_decay: L2 penalty >= 0, added to the gradient.
        initial_accumulator_value: start of the sum of squares, >= 0 (read when a parameter's
            state is created).
        eps: added to the denominator, >= 0.
        maximize: ascend the objective instead of descending it (static).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import Adagrad
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = Adagrad(model.parameters(), lr=0.1)
        >>> opt.step({"w": jnp.array([2.0, -2.0])})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.9, 1.1]
    """

    name = "adagrad"
    static = ("maximize",)

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps)
        defaults["initial_accumulator_value"] = initial_accumulator_value
        super().__init__(params, defaults | dict(maximize=maximize))

    def check(self, group: Mapping[str, Any]) -> None:
        """Refuse a group's bad options (names the option, the value and the range)."""
        for option in ("lr_decay", "weight_decay", "initial_accumulator_value", "eps"):
            _number(option, group[option], 0.0)
        _flag("maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host."""
        return {k: float(group[k]) for k in ("lr_decay", "weight_decay", "eps")}

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> State:
        """``sum``: the running sum of squared gradients."""
        return {"sum": jnp.full_like(param, group["initial_accumulator_value"])}

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: State,
        h: Scalars,
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, State]:
        """One step of one parameter (torch's ``_single_tensor_adagrad``)."""
        grad = -grad if group["maximize"] else grad
        g = _l2(grad, param, h)
        clr = h["lr"] / (1 + (_float(step) - 1) * h["lr_decay"])
        total = state["sum"] + g * g
        std = jnp.sqrt(total) + h["eps"]
        return param + -clr * g / std, {"sum": total}


class Adadelta(Optimizer):
    """Adadelta, as ``torch.optim.Adadelta``.

    Update rule (``v``, ``u`` start at zero)::

        g = g + weight_decay * p
        v = rho * v + (1 - rho) * g**2
        d = sqrt(u + eps) / sqrt(v + eps) * g
        u = rho * u + (1 - rho) * d**2
        p = p - lr * d

    Same arithmetic as torch's single-tensor path, so results agree to float32 rounding. No
    ``capturable``, ``foreach``. State keys ``'adadelta.square_avg.<path>'``,
    ``'adadelta.acc_delta.<path>'``.

    Args:
        params: ``model.parameters()``, or a list of parameter-group dicts.
        lr: scale of the step >= 0 (1.0 is the paper's rule), or a schedule ``step -> lr``.
        rho: decay of the running averages, in [0, 1].
        eps: added inside both square roots, >= 0.
        weight_decay: L2 penalty >= 0, added to the gradient.
        maximize: ascend the objective instead of descending it (static).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import Adadelta
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = Adadelta(model.parameters())
        >>> opt.step({"w": jnp.array([1.0, -1.0])})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.9968, 1.0032]
    """

    name = "adadelta"
    static = ("maximize",)

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def check(self, group: Mapping[str, Any]) -> None:
        """Refuse a group's bad options (names the option, the value and the range)."""
        _number("rho", group["rho"], 0.0, 1.0)
        _number("eps", group["eps"], 0.0)
        _number("weight_decay", group["weight_decay"], 0.0)
        _flag("maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host."""
        rho = float(group["rho"])
        return dict(
            rho=rho,
            one_minus_rho=1 - rho,
            eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]),
        )

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> State:
        """``square_avg`` (of gradients) and ``acc_delta`` (of updates)."""
        return {"square_avg": jnp.zeros_like(param), "acc_delta": jnp.zeros_like(param)}

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: State,
        h: Scalars,
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, State]:
        """One step of one parameter (torch's ``_single_tensor_adadelta``)."""
        grad = -grad if group["maximize"] else grad
        g = _l2(grad, param, h)
        square_avg = state["square_avg"] * h["rho"] + h["one_minus_rho"] * g * g
        std = jnp.sqrt(square_avg + h["eps"])
        delta = jnp.sqrt(state["acc_delta"] + h["eps"]) / std * g
        acc_delta = state["acc_delta"] * h["rho"] + h["one_minus_rho"] * delta * delta
        new = {"square_avg": square_avg, "acc_delta": acc_delta}
        return param + -h["lr"] * delta, new


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
        clr = h["lr"] / _one_minus_pow(h["log_b1"], _float(step))
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
        bias_correction2 = _one_minus_pow(h["log_b2"], t)
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
        corrected = exp_avg / _one_minus_pow(h["log_b1"], t)
        rho_t = h["rho_k"] + _rho_minus_k(t, h["neg_log_b2"])
        rectified = (h["rectify"] > 0) & (rho_t > 5)
        safe_rho = jnp.where(rectified, rho_t, 5.0)  # no NaN from sqrt below in the other branch
        rect = jnp.sqrt((safe_rho - 4) * (safe_rho - 2) * h["rect_scale"] / safe_rho)
        adaptive = jnp.sqrt(_one_minus_pow(h["log_b2"], t)) / (jnp.sqrt(exp_avg_sq) + h["eps"])
        step_ = jnp.where(rectified, corrected * h["lr"] * adaptive * rect, corrected * h["lr"])
        new = {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        return p + -1.0 * step_, new


class Adafactor(Optimizer):
    """Adafactor, as ``torch.optim.Adafactor`` (torch's variant, not optax's).

    Update rule (``t`` the step, from 1; ``R``, ``C``, ``V`` start at zero; ``G`` the
    gradient, ``n`` the number of elements, ``RMS(x) = ||x|| / sqrt(n)``)::

        w = t**beta2_decay                        # 1 - beta2_t
        alpha = max(eps2, RMS(p)) * min(lr, 1 / sqrt(t))
        p = p * (1 - lr * weight_decay)
        # a parameter of 2 or more dimensions, factored over its last two:
        R = R + w * (mean(G**2, dim=-1) - R)      # row_var   [..., rows, 1]
        C = C + w * (mean(G**2, dim=-2) - C)      # col_var   [..., 1, cols]
        V = R * C / max(mean(R, dim=-2), eps1)
        # a vector (or scalar): V = V + w * (G**2 - V)   (variance, the parameter's shape)
        U = G / sqrt(max(V, eps1**2))
        p = p - alpha / max(1, RMS(U) / d) * U

    Same arithmetic as torch's single-tensor path (torch's default for Adafactor), so results
    agree to float32 rounding. torch's variant, followed here, differs from the paper and from
    ``optax.adafactor``: ``lr`` caps the relative step size at ``min(lr, 1/sqrt(t))`` (optax:
    a constant ``learning_rate``, or no relative step with its default None) and scales the
    decoupled weight decay; ``eps1`` bounds ``mean(R)`` and ``V`` below instead of being added
    to ``G**2`` (with gradients near 1e-4 the steps differ by ~0.3%); and every parameter of 2
    or more dimensions is factored over its last two (optax: over its two largest, when both
    are >= 128). With ``optax.adafactor(learning_rate=lr)`` on a 256x128 matrix and unit-scale
    gradients the two agree to float32 rounding while ``t <= 1/lr**2``. State keys
    ``'adafactor.row_var.<path>'`` and ``'adafactor.col_var.<path>'`` (factored) or
    ``'adafactor.variance.<path>'``.

    Args:
        params: ``model.parameters()``, or a list of parameter-group dicts.
        lr: the largest relative step size and the weight decay's scale, >= 0, or a schedule
            ``step -> lr``.
        beta2_decay: the exponent of the second-moment decay (``1 - beta2_t = t**beta2_decay``),
            <= 0.
        eps: ``(eps1, eps2)``: ``eps1`` (None: the parameter dtype's machine epsilon) bounds
            the second-moment estimate below, ``eps2`` the parameter scale; each >= 0.
        d: the update-clipping threshold, >= 1.
        weight_decay: decoupled weight decay >= 0 (scaled by ``lr``).
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import Adafactor
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones((2, 2)))
        >>> model = Scale()
        >>> opt = Adafactor(model.parameters())
        >>> opt.step({"w": jnp.array([[1.0, -1.0], [1.0, -1.0]])})
        >>> [round(x, 4) for x in model.w.value[0].tolist()]
        [0.99, 1.01]
    """

    name = "adafactor"
    static = ("maximize",)

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1e-2,
        beta2_decay: float = -0.8,
        eps: tuple[float | None, float] = (None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay)
        super().__init__(params, defaults | dict(maximize=maximize))

    def check(self, group: Mapping[str, Any]) -> None:
        """Refuse a group's bad options (names the option, the value and the range)."""
        beta2_decay = group["beta2_decay"]
        if isinstance(beta2_decay, bool) or not isinstance(beta2_decay, numbers.Real):
            raise TypeError(f"beta2_decay must be a number <= 0, got {beta2_decay!r}")
        if not float(beta2_decay) <= 0:
            raise ValueError(f"beta2_decay must be a number <= 0, got {beta2_decay!r}")
        eps = group["eps"]
        if not isinstance(eps, tuple | list) or len(eps) != 2:
            raise TypeError(
                f"eps must be a pair (eps1, eps2), eps1 None or a number, got {eps!r}. Fix: "
                "eps=(None, 1e-3)"
            )
        if not _auto(eps[0]):
            _number("eps[0]", eps[0], 0.0)
        _number("eps[1]", eps[1], 0.0)
        _number("d", group["d"], 1.0)
        _number("weight_decay", group["weight_decay"], 0.0)
        _flag("maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host (``eps1_auto``: eps1 is None)."""
        eps1, eps2 = group["eps"]
        return dict(
            beta2_decay=float(group["beta2_decay"]),
            eps2=float(eps2),
            d=float(group["d"]),
            eps1=0.0 if _auto(eps1) else float(eps1),
            eps1_auto=float(_auto(eps1)),
            weight_decay=float(group["weight_decay"]),
        )

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> State:
        """``row_var`` ``[..., rows, 1]`` and ``col_var`` ``[..., 1, cols]`` for a parameter
        of 2 or more dimensions, else ``variance`` (the parameter's shape)."""
        if param.ndim < 2:
            return {"variance": jnp.zeros_like(param)}
        shape = param.shape
        return {
            "row_var": jnp.zeros((*shape[:-1], 1), param.dtype),
            "col_var": jnp.zeros((*shape[:-2], 1, shape[-1]), param.dtype),
        }

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: State,
        h: Scalars,
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, State]:
        """One step of one parameter (torch's ``_single_tensor_adafactor``)."""
        g = -grad if group["maximize"] else grad
        t, size = _float(step), math.prod(param.shape)
        one_minus_beta2 = jnp.exp(h["beta2_decay"] * jnp.log(t))
        rho = jnp.minimum(h["lr"], 1 / jnp.sqrt(t))
        alpha = jnp.maximum(h["eps2"], jnp.linalg.norm(param) / math.sqrt(size)) * rho
        p = param * (1 - h["lr"] * h["weight_decay"])
        eps1 = jnp.where(h["eps1_auto"] > 0, jnp.finfo(param.dtype).eps, h["eps1"])
        if "variance" in state:
            new = {"variance": _lerp(state["variance"], g * g, one_minus_beta2)}
            estimate = new["variance"]
        else:  # torch's norm-then-square means, in its order
            row_mean = jnp.square(jnp.linalg.norm(g, axis=-1, keepdims=True)) / g.shape[-1]
            col_mean = jnp.square(jnp.linalg.norm(g, axis=-2, keepdims=True)) / g.shape[-2]
            row_var = _lerp(state["row_var"], row_mean, one_minus_beta2)
            col_var = _lerp(state["col_var"], col_mean, one_minus_beta2)
            new = {"row_var": row_var, "col_var": col_var}
            row_scale = jnp.maximum(jnp.mean(row_var, axis=-2, keepdims=True), eps1)
            estimate = row_var * col_var / row_scale
        u = jax.lax.rsqrt(jnp.maximum(estimate, eps1 * eps1)) * g
        denom = jnp.maximum(1.0, jnp.linalg.norm(u) / (math.sqrt(size) * h["d"]))
        return p + (-alpha / denom) * u, new


class Lion(Optimizer):
    """Lion (evolved sign momentum), as ``optax.lion`` (torch has no Lion).

    Update rule (``m`` starts at zero)::

        c = b1 * m + (1 - b1) * g
        p = p - lr * (sign(c) + weight_decay * p)     # decoupled decay, scaled by lr
        m = b2 * m + (1 - b2) * g

    The arithmetic of ``optax.lion(lr, b1, b2, weight_decay=weight_decay)``: the same results
    to float32 rounding. The default ``weight_decay`` is 0.0 (optax's is 1e-3). Lion's updates
    all have size ``lr``: use a learning rate 3-10x smaller than AdamW's and a weight decay
    3-10x larger. State key ``'lion.exp_avg.<path>'``.

    Args:
        params: ``model.parameters()``, or a list of parameter-group dicts.
        lr: learning rate >= 0, or a schedule ``step -> lr``.
        betas: ``(b1, b2)``: ``b1`` mixes momentum and gradient for the step's sign, ``b2``
            decays the momentum; each in [0, 1).
        weight_decay: decoupled weight decay >= 0 (scaled by ``lr``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import Lion
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = Lion(model.parameters(), lr=0.1)
        >>> opt.step({"w": jnp.array([3.0, -0.5])})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.9, 1.1]
    """

    name = "lion"

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    def check(self, group: Mapping[str, Any]) -> None:
        """Refuse a group's bad options (names the option, the value and the range)."""
        _betas(group["betas"])
        _number("weight_decay", group["weight_decay"], 0.0)

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host."""
        b1, b2 = (float(b) for b in group["betas"])
        return dict(
            b1=b1,
            one_minus_b1=1 - b1,
            b2=b2,
            one_minus_b2=1 - b2,
            weight_decay=float(group["weight_decay"]),
        )

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> State:
        """``exp_avg``: the momentum."""
        return {"exp_avg": jnp.zeros_like(param)}

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: State,
        h: Scalars,
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, State]:
        """One step of one parameter (``optax.scale_by_lion`` and its chain)."""
        m = state["exp_avg"]
        direction = jnp.sign(h["one_minus_b1"] * grad + h["b1"] * m)
        p = param + -h["lr"] * (direction + h["weight_decay"] * param)
        new = {"exp_avg": h["one_minus_b2"] * grad + h["b2"] * m}
        return p, new
