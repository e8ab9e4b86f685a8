"""Loading PyTorch state dicts into js models, and the reverse.

Each layer whose PyTorch entries differ from its own says so through optional methods, looked
up by name on the layer instance (class or instance methods: ConvTranspose's conversion needs
its ``groups``), with names local to the layer (``'weight'``, not ``'0.conv.weight'``):

- ``from_torch(name, array)``: PyTorch's array -> ours, or ``None`` to drop a PyTorch-only
  entry (BatchNorm's ``num_batches_tracked``);
- ``to_torch(name, array)``: ours -> PyTorch's;
- ``torch_extras()``: ``{name: array}`` PyTorch keeps but js does not (added on export).

A layer without them (RNN, LSTM, GRU, MultiheadAttention, the transformer layers: same keys
and layouts) needs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from js import IncompatibleKeys, Module, check_state_dict
from js._checks import compare_state, tie_state

from ._keys import LoadPlan, plan_load


def _to_numpy(value) -> np.ndarray:
    # Duck-typed so js never imports torch: a torch.Tensor has detach() and cpu().
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu()
        if hasattr(value, "numpy"):
            value = value.numpy()
    return np.asarray(value)


def _identity(name, array):
    return array


def _converter(modules: dict, key: str, method: str):
    """``(convert, local_name)`` for a dotted state-dict key: the owning layer's ``method``
    (``from_torch``/``to_torch``), or the identity for a layer without one or no owner."""
    prefix, _, name = key.rpartition(".")
    owner = modules.get(prefix)
    return (_identity if owner is None else getattr(owner, method, _identity)), name


def from_torch_arrays(model: Module, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``{model path: PyTorch array}`` converted to js's layouts by each owning layer's
    ``from_torch`` (entries it drops, such as ``num_batches_tracked``, are left out)."""
    modules = dict(model.named_modules(remove_duplicate=False))
    converted = {}
    for key, value in arrays.items():
        convert, name = _converter(modules, key, "from_torch")
        array = convert(name, _to_numpy(value))
        if array is not None:
            converted[key] = np.asarray(array, order="C")  # 0-d stays 0-d
    return converted


def load_planned(
    model: Module,
    plan: LoadPlan,
    read: Callable[[list[str]], Mapping[str, Any]],
    layout: str = "js",
) -> IncompatibleKeys:
    """Load the file keys of ``plan`` (from :func:`js.nn._keys.plan_load`) into ``model``, all
    or nothing: ``read(file_keys)`` gives their arrays (only those: a file's ignored and
    unexpected tensors are never read); with ``layout='torch'`` they are converted from
    PyTorch's layouts. One error reports the plan's missing/unexpected keys (when strict) with
    every shape, dtype and tied-value problem, before anything changes. Returns the plan's
    ``IncompatibleKeys`` (``ignored_keys`` included)."""
    arrays = read(list(plan.rename))
    named = {plan.rename[key]: arrays[key] for key in plan.rename}
    if layout == "torch":
        named = from_torch_arrays(model, named)
    else:
        named = check_state_dict(named, plan.owner)
    variables = model._state_variables()
    current = {path: v.get_raw_value() for path, v in variables.items() if path in named}
    _, _, mismatched = compare_state(current, named)
    _, differing = tie_state(variables, named)
    plan.check(mismatched, differing)
    model.load_state_dict(named, strict=False)  # checks again (cheap) and copies
    return plan.incompatible_keys()


def load_torch_state_dict(
    model: Module,
    state_dict: Mapping[str, Any],
    strict: bool = True,
    *,
    prefix: str = "",
    key_mapping: Mapping[str, str] | None = None,
) -> IncompatibleKeys:
    """Load a PyTorch ``state_dict`` into the equivalent js ``model``, all or nothing.

    Values may be torch tensors or NumPy arrays (js never imports torch). Entries are
    converted where the layouts differ (ConvTranspose2d's weight is transposed to
    ``[C_out, C_in, KH, KW]``; BatchNorm's ``num_batches_tracked`` is dropped), then loaded
    as ``model.load_state_dict(..., strict=strict)`` does, every path, shape and dtype checked
    before anything is copied. A Parameter held under several paths (tied weights) is
    supplied by any one of them.

    Args:
        model: the ``js.Module`` to fill.
        state_dict: ``{name: tensor or array}`` with PyTorch's names and layouts.
        strict: with ``False``, missing and unexpected names are skipped and returned.
        prefix: ``''`` or a dotted name ending in ``'.'``: names under it lose it, the others
            are ignored (returned as ``ignored_keys``, never an error).
        key_mapping: ``{regex: replacement}`` renames applied to every name first, as
            transformers' ``from_pretrained(key_mapping=)`` applies them.

    Returns:
        ``IncompatibleKeys(missing_keys, unexpected_keys)`` as ``load_state_dict`` does.

    Example:
        >>> import numpy as np, js, js.nn
        >>> layer = js.nn.Linear(2, 1, rngs=js.Rngs(params=0))
        >>> sd = {"weight": np.ones((1, 2), np.float32), "bias": np.zeros(1, np.float32)}
        >>> js.nn.load_torch_state_dict(layer, sd)
        IncompatibleKeys(missing_keys=[], unexpected_keys=[])
        >>> layer.weight.value.tolist()
        [[1.0, 1.0]]
    """
    if not isinstance(state_dict, Mapping):
        check_state_dict(state_dict, type(model).__name__)  # its TypeError
    plan = plan_load(
        model,
        state_dict.keys(),
        prefix=prefix,
        key_mapping=key_mapping,
        strict=strict,
        layout="torch",
    )
    return load_planned(model, plan, lambda keys: {key: state_dict[key] for key in keys}, "torch")


def torch_state_dict(model: Module) -> dict[str, np.ndarray]:
    """``model``'s state as a PyTorch state dict of NumPy arrays (PyTorch's keys and layouts).

    Load it into the equivalent torch module with
    ``torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})``.

    Example:
        >>> import js, js.nn
        >>> sd = js.nn.torch_state_dict(js.nn.BatchNorm1d(3))
        >>> sorted(sd)
        ['bias', 'num_batches_tracked', 'running_mean', 'running_var', 'weight']
    """
    modules = dict(model.named_modules(remove_duplicate=False))
    out: dict[str, np.ndarray] = {}
    for key, array in model.state_dict().items():
        convert, name = _converter(modules, key, "to_torch")
        out[key] = np.asarray(convert(name, array), order="C")
    for path, module in modules.items():
        extras = getattr(module, "torch_extras", None)
        for name, array in (extras() if extras is not None else {}).items():
            out[f"{path}.{name}" if path else name] = array
    return out
