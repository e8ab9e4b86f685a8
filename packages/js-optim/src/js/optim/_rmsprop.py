"""RMSprop, Adagrad and Adadelta on the optimizer shell (see ``_more_helpers`` for the shared
pieces and the arithmetic's conventions).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from ._more_helpers import (
    Scalars,
    State,
    _flag,
    _float,
    _l2,
    _lerp,
    _number,
)
from ._optimizer import Optimizer
from ._schedules import LearningRate


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
