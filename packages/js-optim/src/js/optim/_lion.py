"""``Lion`` (evolved sign momentum), as ``optax.lion``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from js._checks import check_number, check_pair

from ._arithmetic import (
    Scalars,
    State,
)
from ._optimizer import Optimizer
from ._schedules import LearningRate


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
        check_pair("", "betas", group["betas"], 0, 1, open_high=True)
        check_number("", "weight_decay", group["weight_decay"], 0)

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
