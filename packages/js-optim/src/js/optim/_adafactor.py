"""``Adafactor``, as ``torch.optim.Adafactor`` (torch's algorithm, not optax's)."""

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
    as_float,
    lerp,
)
from ._optimizer import Optimizer
from ._schedules import LearningRate


def _auto(eps1) -> bool:
    """Adafactor's ``eps1=None`` (the dtype's epsilon); NaN is how a state dict stores None."""
    return eps1 is None or (isinstance(eps1, float) and math.isnan(eps1))


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
        check_number("", "beta2_decay", group["beta2_decay"], high=0)
        eps = group["eps"]
        if isinstance(eps, tuple | list) and len(eps) == 2 and _auto(eps[0]):
            check_number("", "eps[1]", eps[1], 0)  # eps1 None: the dtype's epsilon
        else:
            check_pair("", "eps", eps, 0, example=(1e-30, 1e-3))
        check_number("", "d", group["d"], 1)
        check_number("", "weight_decay", group["weight_decay"], 0)
        check_bool("", "maximize", group["maximize"])

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
        t, size = as_float(step), math.prod(param.shape)
        one_minus_beta2 = jnp.exp(h["beta2_decay"] * jnp.log(t))
        rho = jnp.minimum(h["lr"], 1 / jnp.sqrt(t))
        alpha = jnp.maximum(h["eps2"], jnp.linalg.norm(param) / math.sqrt(size)) * rho
        p = param * (1 - h["lr"] * h["weight_decay"])
        eps1 = jnp.where(h["eps1_auto"] > 0, jnp.finfo(param.dtype).eps, h["eps1"])
        if "variance" in state:
            new = {"variance": lerp(state["variance"], g * g, one_minus_beta2)}
            estimate = new["variance"]
        else:  # torch's norm-then-square means, in its order
            row_mean = jnp.square(jnp.linalg.norm(g, axis=-1, keepdims=True)) / g.shape[-1]
            col_mean = jnp.square(jnp.linalg.norm(g, axis=-2, keepdims=True)) / g.shape[-2]
            row_var = lerp(state["row_var"], row_mean, one_minus_beta2)
            col_var = lerp(state["col_var"], col_mean, one_minus_beta2)
            new = {"row_var": row_var, "col_var": col_var}
            row_scale = jnp.maximum(jnp.mean(row_var, axis=-2, keepdims=True), eps1)
            estimate = row_var * col_var / row_scale
        u = jax.lax.rsqrt(jnp.maximum(estimate, eps1 * eps1)) * g
        denom = jnp.maximum(1.0, jnp.linalg.norm(u) / (math.sqrt(size) * h["d"]))
        return p + (-alpha / denom) * u, new
