"""Where each Parameter's gradient is, when its group did not say it in the gradients' terms.

Gradients reach ``step`` keyed by the dotted paths of the model that was differentiated. A
group built from that model (``model.parameters()``, ``model.named_parameters()`` pairs) names
its Parameters by those paths. torch's other group forms do not: ``model.base.parameters()``
names them relative to ``base`` (``'weight'``, where the gradient says ``'base.weight'``), and a
list of Parameters names them not at all. torch never needs the paths (a gradient sits on its
Parameter); js finds them in the first gradients it is given:

- a group with paths gets one prefix, the same for all its Parameters (``'base.'``), under
  which its paths are gradients of the Parameters' shapes;
- a Parameter without a path gets the one remaining gradient of its shape;
- together the groups must claim every gradient once (an unclaimed gradient is refused, as
  before), and exactly one way of doing so must exist.

A tied Parameter has several paths (nanoGPT's ``transformer.wte.weight`` is
``lm_head.weight``), and the gradients hold it once, under the one NNX keeps: the first in
sorted order (``'lm_head.weight'``), where ``named_parameters()`` gives the first in
registration order (``'transformer.wte.weight'``, as torch does). A selection of the whole
model knows both (``ParameterSelection.grad_paths``); pairs and a submodule's selection know
one. So a path of a group that is no gradient under the group's prefix, where the group's
other paths are, is a tied Parameter reached by another of its names: it takes the one
remaining gradient of its shape, as a Parameter without a path does. Of the ways to place the
groups, those that leave the fewest Parameters to their shapes count (none, when no tie is
named differently: the paths decide alone), and exactly one of those must exist; a group none
of whose paths is a gradient goes by shapes entirely. By shape, not by name: pairs and a
submodule's selection carry no model to ask for a Parameter's other paths, and the gradient
cannot be filed under ``named_parameters()``' path instead (inside ``js.jit`` a module is
rebuilt with its attributes in NNX's sorted order, so that path would differ there).

Two submodules of the same structure (``layers[0]`` and ``layers[1]`` in two groups), or two
Parameters of one shape left to their shapes, leave more than one way: that is refused, naming
the candidates, with the fixes (``(path, Parameter)`` pairs from the model's
``named_parameters()``; for ties, the whole model's selection). The answer depends only on the
groups' paths and shapes and on the gradients' paths and shapes, so it is computed once per
structure (:func:`resolve` is cached) and traced code pays nothing.
"""

from __future__ import annotations

import functools
from collections import Counter

from js._checks import flatten_state

# One group as resolve() sees it: per Parameter (path or None, shape, trainable).
Group = tuple[tuple[str | None, tuple[int, ...], bool], ...]
Shapes = dict[str, tuple[int, ...]]  # the gradients: {path: shape}


def _tails(available: Shapes) -> dict[str, list[str]]:
    """Each dotted tail of the gradients' paths, with the prefixes it follows there
    (``'h.0.weight'`` gives ``'weight'``: ``['h.0.']``, ``'0.weight'``: ``['h.']``, and itself:
    ``['']``)."""
    tails: dict[str, list[str]] = {}
    for key in available:
        parts = key.split(".")
        for i in range(len(parts)):
            tails.setdefault(".".join(parts[i:]), []).append(".".join(parts[:i]) + "." * (i > 0))
    return tails


def _placed(group: Group, prefix: str, available: Shapes) -> int:
    """How many trainable paths of ``group`` are gradients of their shapes under ``prefix``; 0
    when one of its paths (a frozen one too) is a gradient of another shape."""
    count = 0
    for path, shape, trainable in group:
        got = available.get(prefix + str(path))
        if got is not None and got != shape:
            return 0
        count += trainable and got is not None
    return count


def _prefixes(group: Group, available: Shapes, tails: dict) -> list[str | None]:
    """The prefixes under which some trainable path of ``group`` is a gradient of its shape
    and none of its paths one of another shape, those placing the most first; ``[None]``
    (every Parameter by its shape) when there is none."""
    paths = [str(path) for path, _, trainable in group if trainable]
    if not paths:
        return [""]
    placed = {prefix: 0 for path in paths for prefix in tails.get(path, ())}
    for prefix in placed:
        placed[prefix] = _placed(group, prefix, available)
    found = sorted((p for p in placed if placed[p]), key=lambda p: -placed[p])  # stable
    return found or [None]


def _claims(group: Group, prefix: str | None, available: Shapes) -> list[str]:
    if prefix is None:
        return []
    return [
        prefix + path for path, _, _ in group if path is not None and prefix + path in available
    ]


def _by_shape(group: Group, prefix: str | None, available: Shapes) -> list[tuple[int, ...]]:
    """The shapes of the trainable Parameters of ``group`` that no path places under
    ``prefix``: they take the remaining gradients of their shapes."""
    keys = [None if prefix is None or path is None else prefix + path for path, _, _ in group]
    return [s for key, (_, s, t) in zip(keys, group, strict=True) if t and key not in available]


def _search(
    groups: tuple[Group, ...], candidates: dict[int, list], available: Shapes, bare: list[int]
) -> list[dict[int, str | None]]:
    """The placements (a prefix per group with paths) that claim every gradient once and
    leave the fewest Parameters to their shapes: one, or the first two found (ambiguous)."""
    order = sorted(candidates, key=lambda i: len(candidates[i]))
    costs = [[len(_by_shape(groups[i], p, available)) for p in candidates[i]] for i in order]
    floor = [sum(min(c) for c in costs[at:]) for at in range(len(order) + 1)]  # a lower bound
    wanted = Counter(shape for i in bare for _, shape, t in groups[i] if t)
    best, found = None, []  # the lowest cost yet, and the placements that have it

    def visit(at: int, chosen: dict, claimed: set, cost: int, shapes: Counter) -> None:
        nonlocal best, found
        bound = cost + floor[at]  # no placement below this one costs less
        if best is not None and (bound > best or (bound == best and len(found) > 1)):
            return
        if at == len(order):
            rest = Counter(available[k] for k in available if k not in claimed)
            if rest == wanted + shapes:  # those left to their shapes take the rest, one each
                if best is None or cost < best:
                    best, found = cost, []
                found.append(dict(chosen))
            return
        i = order[at]
        for prefix, extra in zip(candidates[i], costs[at], strict=True):
            keys = _claims(groups[i], prefix, available)
            if claimed.isdisjoint(keys):
                left = shapes + Counter(_by_shape(groups[i], prefix, available))
                visit(at + 1, {**chosen, i: prefix}, claimed | set(keys), cost + extra, left)

    visit(0, {}, set(), 0, Counter())
    return found


@functools.lru_cache(maxsize=256)
def resolve(
    groups: tuple[Group, ...], available_items: tuple[tuple[str, tuple[int, ...]], ...]
) -> tuple[tuple[str | None, ...], ...] | str:
    """The gradient key of every Parameter (None: a frozen one without a gradient), per group,
    or a sentence saying why there is no single answer.

    ``groups`` holds per group either paths for every Parameter or None for every one (a list
    of Parameters); ``available_items`` the gradients' ``(path, shape)``.
    """
    available = dict(available_items)
    tails = _tails(available)
    with_paths = [i for i, g in enumerate(groups) if g and g[0][0] is not None]
    bare = [i for i, g in enumerate(groups) if g and g[0][0] is None]
    candidates = {i: _prefixes(groups[i], available, tails) for i in with_paths}
    solutions = _search(groups, candidates, available, bare)
    if not solutions:
        lost = [i for i in with_paths if candidates[i] == [None]]
        if lost:
            paths = [p for p, _, t in groups[lost[0]] if t][:3]
            return (
                f"no prefix makes the paths {paths} of param_groups[{lost[0]}] gradients of "
                "their shapes"
            )
        return "no way to give every gradient to one parameter of the groups"
    if len(solutions) > 1:
        differ = [i for i in with_paths if solutions[0][i] != solutions[1][i]]
        shown = ", ".join(
            f"param_groups[{i}] under {solutions[0][i]!r} or {solutions[1][i]!r}" for i in differ
        )
        return f"more than one way to place the groups' paths: {shown}"
    return _keys(groups, solutions[0], available)


def _keys(
    groups: tuple[Group, ...], chosen: dict[int, str | None], available: Shapes
) -> tuple[tuple[str | None, ...], ...] | str:
    """Each Parameter's gradient key under the placement ``chosen``; those left to their shapes
    take the one remaining gradient of theirs (a sentence when two gradients share it)."""
    claimed = {k for i, prefix in chosen.items() for k in _claims(groups[i], prefix, available)}
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for key in available:
        if key not in claimed:
            by_shape.setdefault(available[key], []).append(key)
    shared = [s for s, keys in by_shape.items() if len(keys) > 1]
    if shared:
        keys = by_shape[shared[0]]
        return (
            f"{len(keys)} Parameters given without a path (or tied ones, named otherwise than "
            f"in the gradients) have the shape {list(shared[0])}, and so do the gradients "
            f"{keys[:4]}: which is which cannot be told"
        )
    out: list[tuple[str | None, ...]] = []
    for i, group in enumerate(groups):
        prefix = chosen.get(i)
        row = []
        for path, shape, trainable in group:
            key = None if prefix is None or path is None else prefix + path
            if key is not None and key in available:
                row.append(key)
            else:  # by its shape: the one gradient of it left (checked above)
                row.append(by_shape[shape][0] if trainable else None)
        out.append(tuple(row))
    return tuple(out)


def search_gradients(
    cls: str,
    grads,
    groups: list[tuple[int, ...]],
    sources: tuple[str | None, ...],
    built: tuple,
    trainable: tuple[bool, ...],
    failed: str | None,
) -> list:
    """The gradients of the trainable Parameters in order, found by :func:`resolve`.

    ``groups`` holds each group's Parameter indices, ``sources`` each Parameter's path in its
    group's terms (None: given without one), ``built`` each one's ``(path, shape, ...)``;
    ``failed`` is why the paths as given did not find them (None: not tried)."""
    flat = flatten_state(grads)
    described = tuple(
        tuple((sources[i], built[i][1], trainable[i]) for i in indices) for indices in groups
    )
    available = tuple((key, tuple(getattr(v, "shape", ()))) for key, v in flat.items())
    found = resolve(described, available)
    if isinstance(found, str):
        raise ValueError(
            f"{cls}.step: {failed or 'gradients do not match the parameters'}; nor do the "
            f"gradients' paths place the groups: {found}. Fix: differentiate the model the "
            "groups' parameters come from, or give each group (path, Parameter) pairs of "
            "that model: [(n, p) for n, p in model.named_parameters() if "
            "n.startswith('base.')]; for tied Parameters, selections of the whole model "
            "(model.parameters(), js.optim.param_groups(model)) know their gradients' paths."
        )
    keys: dict[int, str | None] = {}
    for indices, group_keys in zip(groups, found, strict=True):
        keys.update(zip(indices, group_keys, strict=True))
    return [flat[str(keys[i])] for i, t in enumerate(trainable) if t]  # a trainable one has one
