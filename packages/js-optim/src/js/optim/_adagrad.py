"""``Adagrad``, as ``torch.optim.Adagrad``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from js._checks import check_bool, check_number

from ._arithmetic import (
    Scalars,
    State,
    as_float,
    l2,
)
from ._optimizer import Optimizer
from ._schedules import LearningRate


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
            check_number("", option, group[option], 0)
        check_bool("", "maximize", group["maximize"])

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
        g = l2(grad, param, h)
        clr = h["lr"] / (1 + (as_float(step) - 1) * h["lr_decay"])
        total = state["sum"] + g * g
        std = jnp.sqrt(total) + h["eps"]
        return param + -clr * g / std, {"sum": total}
