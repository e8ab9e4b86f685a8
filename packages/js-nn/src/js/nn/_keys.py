"""Which file key loads into which model path, decided from the names alone.

:func:`plan_load` resolves a weight file's keys against a model before any tensor is read: the
``key_mapping`` renames (Hugging Face's ``from_pretrained(key_mapping=)`` rules), the
``prefix`` (keys outside it are ignored, keys under it lose it), tied parameters (a Parameter
held under several paths is supplied by any one of them) and, for PyTorch files, the entries
js does not keep (BatchNorm's ``num_batches_tracked``). ``load_weights`` and
``load_torch_state_dict`` load through it; a loader that reads tensors lazily (slice by slice
onto a mesh) plans with it first.

``key_mapping`` follows transformers 5.23 (``WeightRenaming`` in ``core_model_loading.py``):
each ``{pattern: replacement}`` rule applies in turn to the result of the previous ones (every
matching rule fires, not only the first), and a rule rewrites the first place its pattern
matches (``re.search``), once. A pattern ending in a letter or digit ends on a name boundary
(``weight`` does not match ``weight_scale``); ``*.`` in a pattern stands for any dotted
prefix; ``\\1`` in the replacement is the pattern's first group; a replacement starting with
``^`` anchors its pattern at the start of the key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from js import IncompatibleKeys, Module
from js._checks import load_error, tie_state

LAYOUTS = ("js", "torch")


def check_prefix(prefix: str) -> None:
    """ValueError unless ``prefix`` is ``''`` or a dotted name ending in ``'.'``."""
    if not isinstance(prefix, str) or (prefix and not prefix.endswith(".")):
        raise ValueError(
            f"prefix must be '' or a dotted name ending in '.', got {prefix!r}. "
            f"Fix: prefix='model.'"
        )


@dataclass(frozen=True)
class LoadPlan:
    """What loading a file's keys into a model will do, from :func:`plan_load`.

    Attributes:
        rename: ``{file key: model path}`` for every file key that loads, in the file's order.
            Two file keys may name two paths of one tied Parameter: ``load_state_dict`` checks
            that their values are equal and loads one.
        missing: model paths that nothing supplies (a tied path counts as supplied when any
            path of its Parameter is).
        unexpected: file keys under the prefix that name no model path.
        ignored: file keys outside the prefix (never an error).
        tied: ``{model path: file key}`` for each tied path the file lacks, and the file key
            of the same Parameter that supplies it.
        dropped: file keys of PyTorch-only entries js does not keep (``layout='torch'``:
            BatchNorm's ``num_batches_tracked``); neither loaded nor unexpected.
        strict: whether missing and unexpected keys are errors (:meth:`check`).
        owner: the model's class name, for the error.
    """

    rename: dict[str, str]
    missing: list[str]
    unexpected: list[str]
    ignored: list[str] = field(default_factory=list)
    tied: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    strict: bool = True
    owner: str = "Module"

    def error(
        self, mismatched: Sequence[str] = (), differing: Sequence[str] = ()
    ) -> ValueError | None:
        """``load_state_dict``'s error for this plan (None when it loads): missing and
        unexpected keys when ``strict``, plus the shape/dtype lines ``mismatched`` and the
        tied-value lines ``differing`` a loader found after reading headers or tensors."""
        return load_error(
            self.owner,
            self.missing,
            self.unexpected,
            list(mismatched),
            strict=self.strict,
            differing=differing,
        )

    def check(self, mismatched: Sequence[str] = (), differing: Sequence[str] = ()) -> None:
        """Raise :meth:`error`'s ValueError, if any: call it before reading a tensor.

        Example:
            >>> import js, js.nn as nn
            >>> from js.nn._keys import plan_load
            >>> plan = plan_load(nn.Linear(2, 1, rngs=js.Rngs(params=0)), ["weight"])
            >>> plan.missing
            ['bias']
            >>> plan.check()
            Traceback (most recent call last):
            ...
            ValueError: load_state_dict for Linear failed; nothing was loaded.
              missing keys: 'bias'
            Fix: build the same architecture as the saved one or pass strict=False to skip missing/unexpected keys.
        """  # noqa: E501
        error = self.error(mismatched, differing)
        if error is not None:
            raise error

    def incompatible_keys(self) -> IncompatibleKeys:
        """``IncompatibleKeys(missing, unexpected)`` with ``ignored_keys``: what a load returns."""
        return IncompatibleKeys(list(self.missing), list(self.unexpected), list(self.ignored))


def _target(replacement: str) -> tuple[str, str | None]:
    # transformers' process_target_pattern: the replacement loses a leading '^' and any
    # look-around; its first group (kept for the reverse rename) becomes \1; '\.' becomes '.'.
    target = replacement.removeprefix("^")
    target = re.sub(r"\(\?.+?\)?\)", "", target)
    group = re.search(r"\(.+?\)", target)
    captured = None
    if group is not None:
        captured = group.group(0)
        target = target.replace(captured, r"\1", 1)
    return target.replace(r"\.", "."), captured


def compile_key_mapping(
    key_mapping: Mapping[str, str] | None,
) -> list[tuple[re.Pattern[str], str]]:
    """The rules of ``key_mapping`` as ``(compiled pattern, replacement)``, checked: a pattern
    that is not a regular expression, or a replacement using ``\\1`` without a group, is a
    ValueError naming it. See the module docstring for the semantics (transformers 5.23's)."""
    if key_mapping is None:
        return []
    if not isinstance(key_mapping, Mapping):
        raise TypeError(
            f"key_mapping must be a dict {{pattern: replacement}}, got "
            f"{type(key_mapping).__name__}. Fix: key_mapping={{'^encoder.': 'model.encoder.'}}"
        )
    rules = []
    for pattern, replacement in key_mapping.items():
        if not isinstance(pattern, str) or not isinstance(replacement, str):
            raise TypeError(
                f"key_mapping entries must be str: str, got {pattern!r}: {replacement!r}. "
                "Fix: give each regular expression and its replacement as strings"
            )
        target, captured = _target(replacement)
        source = pattern
        if r"\1" in source:
            if captured is None:
                raise ValueError(
                    f"key_mapping pattern {pattern!r} uses \\1, but its replacement "
                    f"{replacement!r} has no group. Fix: write the group out in the pattern"
                )
            source = source.replace(r"\1", captured, 1)
        if replacement.startswith("^") and not source.startswith("^"):
            source = "^" + source
        source = source.replace("*.", r".*\.")
        if re.search(r"[a-zA-Z0-9]$", source):
            source += r"(?!\w)"  # ends on a name boundary: 'weight' is not 'weight_scale'
        try:
            re.compile(source)  # alone first: the error's position is in the user's pattern
            compiled = re.compile(f"(?P<g0>{source})")
        except re.error as error:
            raise ValueError(
                f"key_mapping pattern {pattern!r} is not a valid regular expression ({error}). "
                "Fix: escape the special characters (re.escape), e.g. r'^encoder\\.layer'"
            ) from None
        if r"\1" in target and compiled.groups < 2:
            raise ValueError(
                f"key_mapping replacement {replacement!r} uses \\1, but pattern {pattern!r} "
                "has no group. Fix: put what \\1 should copy in parentheses, e.g. r'layer\\.(\\d+)'"
            )
        rules.append((compiled, target))
    return rules


def rename_key(rules: Sequence[tuple[re.Pattern[str], str]], key: str) -> str:
    """``key`` after every rule of :func:`compile_key_mapping`, in turn (transformers'
    ``apply_renamings``)."""
    for compiled, target in rules:
        match = compiled.search(key)
        if match is None:
            continue
        replacement = target.replace(r"\1", match.group(2) or "") if r"\1" in target else target
        key = key.replace(match.group(0), replacement, 1)
    return key


def _torch_only(model: Module) -> set[str]:
    """Model paths of the entries PyTorch keeps and js does not (each layer's torch_extras)."""
    paths = set()
    for path, module in model.named_modules(remove_duplicate=False):
        extras = getattr(module, "torch_extras", None)
        for name in extras() if extras is not None else ():
            paths.add(f"{path}.{name}" if path else name)
    return paths


def plan_load(
    model: Module,
    file_keys: Iterable[str],
    *,
    prefix: str = "",
    key_mapping: Mapping[str, str] | None = None,
    strict: bool = True,
    layout: str = "js",
    source: str = "the file",
) -> LoadPlan:
    """Resolve a weight file's keys against ``model`` before reading any tensor.

    Each file key is renamed by ``key_mapping`` (transformers' rules, see the module
    docstring), then ``prefix`` selects: a key starting with it loses it and must name a model
    path (else it is unexpected); any other key is ignored. A Parameter held under several
    paths (tied weights) is supplied by any of them. Errors (before anything is read or
    changed): a bad ``key_mapping`` pattern, two file keys naming one path, no key under
    ``prefix``, a key present both with and without ``prefix``. Missing and unexpected keys
    are not raised here: :meth:`LoadPlan.check` raises them (when ``strict``) with
    ``load_state_dict``'s wording.

    Args:
        model: the module to fill; its paths are those of ``model.state_dict()``.
        file_keys: the file's tensor names (e.g. ``safe_open(path).keys()``).
        prefix: ``''`` or a dotted name ending in ``'.'`` (``'bert.'``).
        key_mapping: ``{regex: replacement}`` rules, as ``from_pretrained(key_mapping=)``.
        strict: recorded in the plan, for :meth:`LoadPlan.check`.
        layout: ``'torch'`` for PyTorch's names: its entries js does not keep are ``dropped``.
        source: names the file in errors.

    Returns:
        a :class:`LoadPlan`.

    Example:
        >>> import js, js.nn as nn
        >>> from js.nn._keys import plan_load
        >>> model = nn.Sequential(nn.Linear(2, 2, rngs=js.Rngs(params=0)))
        >>> keys = ["bert.layer.0.weight", "bert.layer.0.bias", "classifier.weight"]
        >>> plan = plan_load(model, keys, prefix="bert.", key_mapping={r"layer\\.": ""})
        >>> plan.rename, plan.ignored
        ({'bert.layer.0.weight': '0.weight', 'bert.layer.0.bias': '0.bias'}, ['classifier.weight'])
    """
    check_prefix(prefix)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    rules = compile_key_mapping(key_mapping)
    keys = list(file_keys)
    bad = [key for key in keys if not isinstance(key, str)]
    if bad:
        raise TypeError(f"file keys must be strings, got {bad[:3]!r}")
    renamed = {key: rename_key(rules, key) for key in keys}
    inside = {key: name for key, name in renamed.items() if name.startswith(prefix)}
    ignored = [key for key in keys if key not in inside]
    if prefix:
        if not inside:
            starts = sorted({name.split(".")[0] + "." for name in renamed.values()})
            raise KeyError(
                f"no tensor of {source} starts with prefix {prefix!r}"
                + (" after key_mapping" if rules else "")
                + f"; names start with {starts[:5]}. Fix: pass one of those prefixes, "
                "or prefix=''"
            )
        inside = {key: name[len(prefix) :] for key, name in inside.items()}
        outside = {renamed[key]: key for key in ignored}
        both = next((key for key, name in inside.items() if name in outside), None)
        if both is not None:
            raise ValueError(
                f"{source} holds both {both!r} and {outside[inside[both]]!r}: with "
                f"prefix={prefix!r} both name the same entry. Fix: pass prefix=''"
            )
    by_name: dict[str, str] = {}
    for key, name in inside.items():
        if name in by_name:
            raise ValueError(
                f"file keys {by_name[name]!r} and {key!r} both become {name!r}"
                + (f" (key_mapping, prefix={prefix!r})" if rules else f" (prefix={prefix!r})")
                + f"; nothing was loaded. Fix: change key_mapping so that one key maps onto "
                f"{name!r}"
            )
        by_name[name] = key
    variables = model._state_variables()  # the listing load_state_dict loads into
    torch_only = _torch_only(model) if layout == "torch" else set()
    rename = {key: name for key, name in inside.items() if name in variables}
    dropped = [key for key, name in inside.items() if name not in variables and name in torch_only]
    unexpected = [
        key for key, name in inside.items() if name not in variables and name not in torch_only
    ]
    filled, _ = tie_state(variables, by_name.keys() & variables.keys())
    missing = [path for path in variables if path not in by_name and path not in filled]
    tied = {path: by_name[supplier] for path, supplier in filled.items()}
    return LoadPlan(
        rename=rename,
        missing=missing,
        unexpected=unexpected,
        ignored=ignored,
        tied=tied,
        dropped=dropped,
        strict=bool(strict),
        owner=type(model).__name__,
    )
