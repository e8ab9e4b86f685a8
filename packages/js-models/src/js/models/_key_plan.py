"""Planning a load: which file tensor fills each variable of the model, and what is missing,
unexpected, ignored or mis-shaped, checked before anything is read."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from js.nn._keys import compile_key_mapping, plan_load, rename_key

from ._folders import FamilyModel
from ._weight_files import _Weights


class _Plan(NamedTuple):
    source: dict[str, str]  # model path (the variable's first path) -> file key
    missing: list[str]
    unexpected: list[str]
    ignored: list[str]  # skipped by design (reported, not errors)
    mismatched: list[str]


def _plan_keys(
    cls: type[FamilyModel],
    model: Any,
    variables: Mapping[str, Any],
    weights: _Weights,
    strict: bool,
) -> _Plan:
    """Which file tensor fills each variable; what is missing, unexpected, ignored, mis-shaped.

    Names are resolved by ``js.nn``'s ``plan_load`` after the class's ``key_mapping``, with
    transformers' ``base_model_prefix`` rule: a model with a head (a ``transformer``/``model``
    child) reading a base model's file puts the prefix in front of its names; a base model
    reading a head model's file takes the names under the prefix and ignores the head.
    """
    rules = compile_key_mapping(cls.key_mapping)
    names = {key: rename_key(rules, key) for key in weights.shapes}
    prefix = cls.base_model_prefix
    head_model = bool(prefix) and any(path.startswith(prefix + ".") for path in variables)
    file_prefixed = bool(prefix) and any(n.startswith(prefix + ".") for n in names.values())
    plan_prefix = ""
    if head_model and not file_prefixed:  # a base model's file into a model with a head
        names = {k: f"{prefix}.{n}" for k, n in names.items()}
    elif prefix and not head_model and file_prefixed:  # a head model's file into its base
        plan_prefix = prefix + "."
    file_key = {name: key for key, name in names.items()}
    plan = plan_load(model, list(file_key), prefix=plan_prefix, strict=strict, source="the folder")
    source, mismatched, seen = {}, [], set()
    for name, path in plan.rename.items():
        key = file_key[name]
        want = tuple(variables[path].get_raw_value().shape)
        if weights.shapes[key] != want:
            mismatched.append(f"{key!r}: file {list(weights.shapes[key])}, model {list(want)}")
        if id(variables[path]) not in seen:  # a tied Parameter is read once
            seen.add(id(variables[path]))
            source[path] = key
    # transformers' _keys_to_ignore_on_load_unexpected: only keys the model has no place for
    ignore = [re.compile(p) for p in cls.ignore_on_load]
    unexpected = [file_key[n] for n in plan.unexpected]
    skipped = [k for k in unexpected if any(p.search(k) or p.search(names[k]) for p in ignore)]
    return _Plan(
        source,
        list(plan.missing),
        sorted(set(unexpected) - set(skipped)),
        sorted([*skipped, *(file_key[n] for n in plan.ignored)]),
        mismatched,
    )


def _check_plan(cls: type, folder: Path, plan: _Plan, strict: bool) -> None:
    problems = []
    if strict and plan.missing:
        problems.append(f"missing from the folder ({len(plan.missing)}): {plan.missing}")
    if strict and plan.unexpected:
        problems.append(
            f"unexpected (the model has no place for them) ({len(plan.unexpected)}): "
            f"{plan.unexpected}"
        )
    if plan.mismatched:
        problems.append(f"mis-shaped: {'; '.join(plan.mismatched)}")
    if problems:
        fix = "build the config the weights were saved with" + (
            ", or pass strict=False to skip missing/unexpected tensors" if strict else ""
        )
        raise ValueError(
            f"{cls.__name__}.from_pretrained({folder}): the weights do not fit the model; "
            "nothing was loaded.\n  " + "\n  ".join(problems) + f"\nFix: {fix}."
        )
