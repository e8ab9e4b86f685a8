"""``Adamax`` (Adam with the infinity norm), as ``torch.optim.Adamax``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from js._checks import check_bool, check_number, check_pair

from ._arithmetic import (
    Scalars,
    State,
    as_float,
    bias_correction,
    l2,
    lerp,
    log_or_inf,
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
        check_pair("", "betas", group["betas"], 0, 1, open_high=True)
        check_number("", "eps", group["eps"], 0)
        check_number("", "weight_decay", group["weight_decay"], 0)
        check_bool("", "maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host."""
        b1, b2 = (float(b) for b in group["betas"])
        return dict(
            one_minus_b1=1 - b1,
            b2=b2,
            log_b1=log_or_inf(b1),
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
        g = l2(grad, param, h)
        exp_avg = lerp(state["exp_avg"], g, h["one_minus_b1"])
        exp_inf = jnp.maximum(state["exp_inf"] * h["b2"], jnp.abs(g) + h["eps"])
        clr = h["lr"] / bias_correction(h["log_b1"], as_float(step))
        new = {"exp_avg": exp_avg, "exp_inf": exp_inf}
        return param + -clr * exp_avg / exp_inf, new
