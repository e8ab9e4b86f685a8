"""Where each Parameter's gradient is, when its group did not say it in the model's terms.

Gradients reach ``step`` keyed by the dotted paths of the model that was differentiated. A
group built from that model (``model.parameters()``, ``model.named_parameters()`` pairs) names
its Parameters by those paths. torch's other group forms do not: ``model.base.parameters()``
names them relative to ``base`` (``'weight'``, where the gradient says ``'base.weight'``), and a
list of Parameters names them not at all. torch never needs the paths (a gradient sits on its
Parameter); js finds them in the first gradients it is given:

- a group with paths gets one prefix, the same for all its Parameters (``'base.'``): the one
  under which every path of the group is a gradient of the Parameter's shape;
- a Parameter without a path gets the one remaining gradient of its shape;
- together the groups must claim every gradient once (an unclaimed gradient is refused, as
  before), and exactly one way of doing so must exist.

Two submodules of the same structure (``layers[0]`` and ``layers[1]`` in two groups), or two
path-less Parameters of one shape, leave more than one way: that is refused, naming the
candidates, with the fix (``(path, Parameter)`` pairs from the model's ``named_parameters()``).
The answer depends only on the groups' paths and shapes and on the gradients' paths and shapes,
so it is computed once per structure (:func:`resolve` is cached) and traced code pays nothing.
"""

from __future__ import annotations

import functools
from collections import Counter

from js._checks import flatten_state

# One group as resolve() sees it: per Parameter (path or None, shape, trainable).
Group = tuple[tuple[str | None, tuple[int, ...], bool], ...]


def _prefixes(group: Group, available: dict[str, tuple[int, ...]]) -> list[str]:
    """Every prefix under which each trainable path of ``group`` is a gradient of its shape
    (and each frozen one, if given, too)."""
    first = next((path for path, _, trainable in group if trainable), None)
    if first is None:
        return [""]
    found = [key[: len(key) - len(first)] for key in available if key == first]
    found += [key[: len(key) - len(first)] for key in available if key.endswith("." + first)]
    return [
        prefix
        for prefix in dict.fromkeys(found)
        if all(
            available.get(prefix + str(path)) == shape
            if trainable
            else available.get(prefix + str(path), shape) == shape
            for path, shape, trainable in group
        )
    ]


def _claims(group: Group, prefix: str, available: dict) -> list[str]:
    return [
        prefix + path for path, _, _ in group if path is not None and prefix + path in available
    ]


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
    with_paths = [i for i, g in enumerate(groups) if g and g[0][0] is not None]
    bare = [i for i, g in enumerate(groups) if g and g[0][0] is None]
    candidates = {i: _prefixes(groups[i], available) for i in with_paths}
    lost = [i for i in with_paths if not candidates[i]]
    if lost:
        paths = [p for p, _, t in groups[lost[0]] if t][:3]
        return (
            f"no prefix makes the paths {paths} of param_groups[{lost[0]}] gradients of their "
            "shapes"
        )
    solutions: list[dict[int, str]] = []
    order = sorted(with_paths, key=lambda i: len(candidates[i]))

    def search(at: int, chosen: dict[int, str], claimed: set[str]) -> None:
        if len(solutions) > 1:
            return
        if at == len(order):
            rest = Counter(available[k] for k in available if k not in claimed)
            wanted = Counter(shape for i in bare for _, shape, t in groups[i] if t)
            if rest == wanted:  # the path-less Parameters take the rest, shape by shape
                solutions.append(dict(chosen))
            return
        i = order[at]
        for prefix in candidates[i]:
            keys = _claims(groups[i], prefix, available)
            if claimed.isdisjoint(keys):
                search(at + 1, {**chosen, i: prefix}, claimed | set(keys))

    search(0, {}, set())
    if not solutions:
        return "no way to give every gradient to one parameter of the groups"
    if len(solutions) > 1:
        differ = [i for i in with_paths if solutions[0][i] != solutions[1][i]]
        shown = ", ".join(
            f"param_groups[{i}] under {solutions[0][i]!r} or {solutions[1][i]!r}" for i in differ
        )
        return f"more than one way to place the groups' paths: {shown}"
    chosen = solutions[0]
    claimed = {k for i in with_paths for k in _claims(groups[i], chosen[i], available)}
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for key in available:
        if key not in claimed:
            by_shape.setdefault(available[key], []).append(key)
    shared = [s for s, keys in by_shape.items() if len(keys) > 1]
    if shared:
        keys = by_shape[shared[0]]
        return (
            f"{len(keys)} Parameters given without a path have the shape {list(shared[0])}, "
            f"and so do the gradients {keys[:4]}: which is which cannot be told"
        )
    out: list[tuple[str | None, ...]] = []
    for i, group in enumerate(groups):
        if i in chosen:
            prefix = chosen[i]
            keys = [prefix + str(path) for path, _, _ in group]
            out.append(tuple(key if key in available else None for key in keys))
        else:
            out.append(
                tuple(by_shape[shape][0] if t else None for _, shape, t in group)  # one each
            )
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
            "n.startswith('base.')]."
        )
    keys: dict[int, str | None] = {}
    for indices, group_keys in zip(groups, found, strict=True):
        keys.update(zip(indices, group_keys, strict=True))
    return [flat[str(keys[i])] for i, t in enumerate(trainable) if t]  # a trainable one has one
