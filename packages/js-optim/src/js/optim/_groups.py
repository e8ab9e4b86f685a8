"""``param_groups(model, ...)``: the usual two groups, with and without weight decay."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any

import js


def _matches(path: str, patterns: Sequence[str]) -> bool:
    # A leading dot lets "*.bias" match a top-level "bias" too.
    return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase("." + path, p) for p in patterns)


def param_groups(
    model: js.Module,
    weight_decay: float = 0.1,
    no_decay: Sequence[str] = ("*.bias", "*norm*"),
    **options: Any,
) -> list[dict[str, Any]]:
    """Split ``model``'s trainable parameters into a decayed group and an undecayed one.

    The usual recipe for transformers (biases and normalization weights are not decayed):
    ``[{"params": decay, "weight_decay": weight_decay, **options}, {"params": rest,
    "weight_decay": 0.0, **options}]``, for any js optimizer's ``params``. A parameter goes
    to the second group when its dotted path matches one of ``no_decay`` (``fnmatch``
    patterns, case-sensitive; ``"*.bias"`` also matches a top-level ``bias``). Parameters with
    ``requires_grad=False`` are left out, and so is a group that comes out empty.

    Args:
        model: the module whose parameters are split.
        weight_decay: the first group's weight decay.
        no_decay: path patterns of the parameters without decay.
        **options: more options for both groups (e.g. ``lr=3e-4``).

    Returns:
        The list of groups (selections of ``model.parameters()``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> class Block(js.Module):
        ...     def __init__(self):
        ...         self.weight = js.Parameter(jnp.ones((2, 2)))
        ...         self.bias = js.Parameter(jnp.zeros(2))
        >>> groups = js.optim.param_groups(Block(), weight_decay=0.1)
        >>> [(list(g["params"].paths), g["weight_decay"]) for g in groups]
        [(['weight'], 0.1), (['bias'], 0.0)]
    """
    if not isinstance(model, js.Module):
        raise TypeError(
            f"param_groups: model must be a js.Module, got {type(model).__name__}. Fix: "
            "param_groups(model, weight_decay=0.1)"
        )
    if isinstance(no_decay, str):
        raise TypeError(
            f"param_groups: no_decay must be a sequence of patterns, got the string "
            f"{no_decay!r}. Fix: no_decay=({no_decay!r},)"
        )
    if "params" in options:
        raise ValueError("param_groups: 'params' is what this function computes; drop it")
    selection = model.parameters()
    decay, rest = [], []
    for (path, param), grad_path in zip(selection.named(), selection.grad_paths, strict=True):
        if not getattr(param, "requires_grad", True):
            continue
        (rest if _matches(path, no_decay) else decay).append(((path, param), grad_path))
    groups = []
    for members, wd in ((decay, weight_decay), (rest, 0.0)):
        if members:
            named = [pair for pair, _ in members]
            params = js.ParameterSelection(named, tuple(g for _, g in members))
            groups.append({"params": params, "weight_decay": wd, **options})
    return groups
