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

from collections.abc import Mapping
from typing import Any

import numpy as np

from js import IncompatibleKeys, Module


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


def load_torch_state_dict(
    model: Module, state_dict: Mapping[str, Any], strict: bool = True
) -> IncompatibleKeys:
    """Load a PyTorch ``state_dict`` into the equivalent js ``model``, all or nothing.

    Values may be torch tensors or NumPy arrays (js never imports torch). Entries are
    converted where the layouts differ (ConvTranspose2d's weight is transposed to
    ``[C_out, C_in, KH, KW]``; BatchNorm's ``num_batches_tracked`` is dropped), then loaded
    with ``model.load_state_dict(..., strict=strict)``, which checks every path, shape and
    dtype before copying anything.

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
    modules = dict(model.named_modules(remove_duplicate=False))
    converted = {}
    for key, value in state_dict.items():
        convert, name = _converter(modules, key, "from_torch")
        array = convert(name, _to_numpy(value))
        if array is not None:
            converted[key] = np.asarray(array, order="C")  # 0-d stays 0-d
    return model.load_state_dict(converted, strict=strict)


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
