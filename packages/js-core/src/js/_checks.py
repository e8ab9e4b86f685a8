"""The one check vocabulary of the js distributions: argument checks, meshes, state comparison.

Internal, but shared: js-core, js-nn, js-losses, js-optim and js-train import it (every js
distribution depends on js-core); users should not. Its names and signatures are part of the
interface js-core offers its siblings (``INTERFACE`` in ``_version.py``, docs/versioning.md):
change one only with a new interface.

One convention for every check, so that a layer, a loss, an optimizer and the Trainer refuse a
bad argument alike:

- ``owner`` names who checks, as the user wrote it (``'Dropout'``, ``'Trainer'``,
  ``'js.shard'``), ``name`` the argument; messages read ``"{owner}: {name} must be ..., got
  {value!r} (a {type}). Fix: ..."``. An empty ``owner`` leaves the prefix to the caller (an
  optimizer's option checks: the optimizer adds its class and parameter group).
- A wrong type is a TypeError, a value out of range a ValueError, a name a mesh lacks a
  :class:`MeshAxisError` (a KeyError whose ``str()`` is the plain message).
- NumPy scalars are accepted wherever Python numbers are: ``np.integer`` as an int,
  ``np.floating`` or ``np.integer`` as a probability, ``np.bool_`` as a bool. A bool (Python's
  or NumPy's) is never an int or a probability: ``True`` is an int to Python, but never meant
  as a count. Each check returns the plain Python value (``int``, ``float``, ``bool``), so a
  NumPy scalar does not reach a static field or a compiled program's cache key.

The functions:

- :func:`check_int` — an integer ``>= minimum`` (or unbounded) as an ``int``.
- :func:`check_bool` — ``True``/``False`` (``np.bool_`` too) as a ``bool``.
- :func:`check_probability` — a real number in ``[0, 1]`` as a ``float``.
- :func:`check_number` — a real number in a range (``>= 0``, ``in [0, 1)``, ...) as a ``float``.
- :func:`check_pair` — two such numbers (``betas``) as a ``tuple`` of floats.
- :func:`check_mesh` — a ``jax.sharding.Mesh`` with ``AxisType.Auto`` axes (NotImplementedError
  for Explicit ones), and optionally one axis it must have.
- :func:`sharding_of` — the sharding of a concrete ``jax.Array``; None for a tracer or another
  value.
- :func:`compare_state` — what keeps a ``{key: array}`` dict from loading into another: missing,
  unexpected and mis-shaped keys.
- :func:`tie_state` — the paths of a shared (tied) variable that one given path of it fills, and
  the tied entries given twice with different values.
- :func:`load_error` — the one strict ``load_state_dict`` error, built from those lists.
- :func:`flatten_state` — ``{dotted.path: leaf}`` of a nested dict or an ``nnx.State``.
"""

from __future__ import annotations

import numbers
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeGuard

import jax
import jax.core
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh


class MeshAxisError(KeyError):
    """A name that is not an axis of the mesh. A KeyError (a missing name), whose ``str()`` is
    the message itself: KeyError's own ``str()`` quotes it and escapes its characters."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _kind(value) -> str:
    return f"{value!r} (a {type(value).__name__})"


def _at(owner: str) -> str:
    """The message's prefix: ``'Owner: '``, or nothing for an empty owner (the caller adds it)."""
    return f"{owner}: " if owner else ""


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a Python or NumPy integer, and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_int(owner: str, name: str, value, minimum: int | None = 1) -> int:
    """``value`` as a Python ``int`` when it is an integer ``>= minimum`` (None: any integer).

    TypeError for anything that is not an integer (a bool and an integral float included),
    ValueError below ``minimum``::

        Linear: in_features must be an int >= 1, got True (a bool). Fix: pass an integer, e.g.
        in_features=1
    """
    bound = "" if minimum is None else f" >= {minimum}"
    if not is_int(value):
        raise TypeError(
            f"{_at(owner)}{name} must be an int{bound}, got {_kind(value)}. Fix: pass an integer, "
            f"e.g. {name}={max(minimum or 1, 1)}"
        )
    if minimum is not None and value < minimum:
        raise ValueError(f"{_at(owner)}{name} must be an int{bound}, got {value!r}")
    return int(value)


def check_bool(owner: str, name: str, value) -> bool:
    """``value`` as a Python ``bool`` when it is ``True``/``False`` (``np.bool_`` too).

    TypeError for anything else, 0 and 1 included (a PyTorch flag is a bool, and a number
    passed for one is usually an argument in the wrong place)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(
            f"{_at(owner)}{name} must be True or False, got {_kind(value)}. Fix: pass "
            f"{name}=True or {name}=False"
        )
    return bool(value)


def check_probability(owner: str, name: str, value) -> float:
    """``value`` as a Python ``float`` when it is a real number in ``[0, 1]``.

    TypeError for a bool or a non-number (a string), ValueError outside ``[0, 1]`` (NaN
    included)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{_at(owner)}{name} must be a float in [0, 1], got {_kind(value)}. Fix: pass a "
            f"probability, e.g. {name}=0.1"
        )
    probability = float(value)
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"{_at(owner)}{name} must be in [0, 1], got {value!r}")
    return probability


def _span(low: float | None, high: float | None, open_low: bool, open_high: bool) -> str:
    """The range in words: ``' >= 0'``, ``' <= 0'``, ``' in [0, 1)'`` (``''``: any number)."""
    if low is not None and high is not None:
        return f" in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
    if low is not None:
        return f" {'>' if open_low else '>='} {low}"
    if high is not None:
        return f" {'<' if open_high else '<='} {high}"
    return ""


def check_number(
    owner: str,
    name: str,
    value,
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    """``value`` as a Python ``float`` when it is a real number between ``low`` and ``high``
    (each bound optional, included unless ``open_low``/``open_high``).

    TypeError for a bool or a non-number (a string, None, a tuple), ValueError outside the
    range (NaN included)::

        Adam: eps must be a number >= 0.0, got 'x' (a str). Fix: pass a number >= 0.0, e.g.
        eps=0.0
    """
    span = _span(low, high, open_low, open_high)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        example = low if low is not None and not open_low else high if high is not None else 0.0
        if example is None or (example == high and open_high):
            example = (low or 0.0) + 0.5 if high is None else ((low or 0.0) + high) / 2
        raise TypeError(
            f"{_at(owner)}{name} must be a number{span}, got {_kind(value)}. Fix: pass a "
            f"number{span}, e.g. {name}={float(example)!r}"
        )
    number = float(value)
    inside = (low is None or (number > low if open_low else number >= low)) and (
        high is None or (number < high if open_high else number <= high)
    )
    if not inside:  # NaN compares False everywhere: refused
        raise ValueError(f"{_at(owner)}{name} must be a number{span}, got {value!r}")
    return number


def check_pair(
    owner: str,
    name: str,
    value,
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
    example: tuple[float, float] = (0.9, 0.999),
) -> tuple[float, float]:
    """``value`` as a ``tuple`` of two floats when it is a tuple or list of two numbers, each
    as :func:`check_number` wants (``betas``; each element is named ``name[i]``).

    TypeError for anything but a pair (a string, one number, three numbers) and for an element
    that is not a number, ValueError for an element outside the range::

        NAdam: betas must be a pair of numbers in [0.0, 1.0), got 'ab' (a str). Fix: pass two
        numbers, e.g. betas=(0.9, 0.999)
        Adam: betas[1] must be a number in [0.0, 1.0), got 1.0
    """
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        span = _span(low, high, open_low, open_high)
        raise TypeError(
            f"{_at(owner)}{name} must be a pair of numbers{span}, got {_kind(value)}. Fix: pass "
            f"two numbers, e.g. {name}={example!r}"
        )
    bounds = {"low": low, "high": high, "open_low": open_low, "open_high": open_high}
    first = check_number(owner, f"{name}[0]", value[0], **bounds)
    return first, check_number(owner, f"{name}[1]", value[1], **bounds)


def check_mesh(owner: str, mesh, axis: str | None = None, *, name: str = "axis") -> Mesh:
    """``mesh`` when it is a ``jax.sharding.Mesh`` with ``AxisType.Auto`` axes (and, when
    ``axis`` is given, an axis of that name; ``name`` is the argument that gave it).

    TypeError for another object, NotImplementedError for Explicit or Manual axes (js leaves
    the partitioning to XLA's SPMD partitioner, which needs Auto axes; ``jax.make_mesh`` makes
    Explicit ones by default), :class:`MeshAxisError` for an ``axis`` the mesh lacks."""
    if not isinstance(mesh, Mesh):
        raise TypeError(
            f"{owner}: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}. Fix: "
            'mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))'
        )
    explicit = [
        n for n, t in zip(mesh.axis_names, mesh.axis_types, strict=True) if t != AxisType.Auto
    ]
    if explicit:
        names = ", ".join(repr(n) for n in mesh.axis_names)
        raise NotImplementedError(
            f"{owner}: mesh axes {explicit} are not AxisType.Auto (jax.make_mesh makes Explicit "
            "axes by default); js leaves the partitioning to XLA's SPMD partitioner, which needs "
            f"Auto axes. Fix: jax.make_mesh(shape, ({names},), axis_types=(AxisType.Auto,) * "
            f"{len(mesh.axis_names)})"
        )
    if axis is not None and axis not in mesh.axis_names:
        raise MeshAxisError(
            f"{owner}: {name} {axis!r} is not an axis of the mesh; its axes are "
            f"{list(mesh.axis_names)}. Fix: name one of them, or build the mesh with it."
        )
    return mesh


def sharding_of(value):
    """The sharding of a concrete ``jax.Array``; None for a tracer (a value inside a trace, whose
    placement is the compiler's) or a value that is not a JAX array (NumPy, Python)."""
    if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
        return value.sharding
    return None


def compare_state(current: Mapping, given: Mapping) -> tuple[list, list, list]:
    """What keeps ``given`` ``{key: array}`` from loading into ``current`` ``{key: array}``.

    Returns ``(missing, unexpected, mismatched)``: keys of ``current`` absent from ``given``,
    keys of ``given`` absent from ``current``, and one ``"'key': expected [..] dtype, got [..]
    dtype"`` line per entry whose shape or dtype differs, each list in the dicts' order. Every
    strict ``load_state_dict`` of js builds its one error from these (Module, Rngs, js-optim's
    optimizers).
    """
    missing = [key for key in current if key not in given]
    unexpected = [key for key in given if key not in current]
    mismatched = []
    for key, have in current.items():
        got = given.get(key)
        # Compared as (shape, dtype) first and formatted only when they differ: formatting a
        # dtype costs microseconds, and a model can hold tens of thousands of arrays.
        if got is not None and (tuple(have.shape), have.dtype) != (tuple(got.shape), got.dtype):
            want = f"{list(have.shape)} {np.dtype(have.dtype)}"
            found = f"{list(got.shape)} {np.dtype(got.dtype)}"
            if want != found:
                mismatched.append(f"{key!r}: expected {want}, got {found}")
    return missing, unexpected, mismatched


def _same_values(a, b) -> bool:
    if a is b:
        return True
    a, b = np.asarray(a), np.asarray(b)
    if (a.shape, a.dtype) != (b.shape, b.dtype):
        return True  # compare_state reports the entry whose shape or dtype is wrong
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def tie_state(variables: Mapping[str, Any], given: Collection[str]) -> tuple[dict, list]:
    """How the tied entries of ``variables`` ``{path: variable}`` load from ``given``.

    A model may hold one variable under several paths (``lm_head.weight`` is
    ``embed.weight``): every path is a state-dict key, as in PyTorch, and any one of them
    supplies the variable. Returns ``(filled, differing)``: ``{path: given path}`` for each
    path of a tied variable that ``given`` lacks while it holds another path of the same
    variable (the first, in ``variables``' order), and, when ``given`` is a mapping of arrays,
    one ``"'a' and 'b' (one tied variable) hold different values"`` line per two given paths
    of one variable whose values differ (equal values load once). Variables are told apart by
    identity. Every ``load_state_dict`` of a module, and js-nn's ``plan_load``, resolve ties
    with it.
    """
    if len({id(variable) for variable in variables.values()}) == len(variables):
        return {}, []  # nothing tied: the common case, one pass
    groups: dict[int, list[str]] = {}
    for path, variable in variables.items():
        groups.setdefault(id(variable), []).append(path)
    filled: dict[str, str] = {}
    differing: list[str] = []
    values = given if isinstance(given, Mapping) else None
    for paths in groups.values():
        present = [path for path in paths if path in given]
        if len(paths) < 2 or not present:
            continue
        filled.update({path: present[0] for path in paths if path not in given})
        for other in present[1:]:
            if values is not None and not _same_values(values[present[0]], values[other]):
                differing.append(
                    f"{present[0]!r} and {other!r} (one tied variable) hold different values"
                )
    return filled, differing


def load_error(
    owner: str,
    missing: Sequence[str],
    unexpected: Sequence[str],
    mismatched: Sequence[str],
    *,
    strict: bool,
    differing: Sequence[str] = (),
) -> ValueError | None:
    """The one error of a ``load_state_dict`` of ``owner`` (a class name), or None when it
    loads: missing and unexpected keys count only when ``strict``; ``mismatched`` (from
    :func:`compare_state`) and ``differing`` (from :func:`tie_state`) always do. A module's
    ``load_state_dict`` and js-nn's ``load_weights`` (before it reads a tensor) raise it."""
    problems = []
    if strict and missing:
        problems.append("missing keys: " + ", ".join(map(repr, missing)))
    if strict and unexpected:
        problems.append("unexpected keys: " + ", ".join(map(repr, unexpected)))
    if mismatched:
        problems.append("mismatched entries: " + "; ".join(mismatched))
    if differing:
        problems.append("tied entries that differ: " + "; ".join(differing))
    if not problems:
        return None
    fix = "build the same architecture as the saved one"
    if differing:
        fix = "give one value per tied variable (drop all but one of its keys), or " + fix
    return ValueError(
        f"load_state_dict for {owner} failed; nothing was loaded.\n  "
        + "\n  ".join(problems)
        + f"\nFix: {fix}"
        + (" or pass strict=False to skip missing/unexpected keys." if strict else ".")
    )


def flatten_state(tree) -> dict[str, Any]:
    """``{dotted.path: leaf}`` of a nested mapping or an ``nnx.State`` (Variables unwrapped to
    their arrays); keys become strings (``{"layers": {0: {"w": a}}}`` -> ``{"layers.0.w": a}``).

    TypeError for anything else (the caller names what it expected)."""
    if isinstance(tree, nnx.State):
        pairs = nnx.to_flat_state(tree)
    elif isinstance(tree, Mapping):
        pairs = [((key,), value) for key, value in tree.items()]
    else:
        raise TypeError(f"expected an nnx.State or a dict, got {type(tree).__name__}")
    flat = {}
    for path, leaf in pairs:
        where = ".".join(map(str, path))
        if isinstance(leaf, Mapping):
            flat.update({f"{where}.{sub}": value for sub, value in flatten_state(leaf).items()})
        else:
            flat[where] = leaf.get_raw_value() if isinstance(leaf, nnx.Variable) else leaf
    return flat
