"""LoRA adapters on a model's linear layers, in Hugging Face PEFT 0.21's format.

- :func:`inject` wraps the layers whose dotted names (``model.named_modules()``) match the
  targets in :class:`js.nn.LoRALinear` and freezes every other parameter, as PEFT's
  ``get_peft_model`` does: ``js.value_and_grad`` then differentiates ``lora_A``/``lora_B`` only.
- :func:`merge` folds each adapter into its base weight and puts the base layer back.
- :func:`save_adapter` writes the folder PEFT's ``save_pretrained`` writes
  (``adapter_config.json`` and ``adapter_model.safetensors`` with keys
  ``base_model.model.<path>.lora_A.weight``); :func:`load_adapter` reads one, checking the
  config and every key before anything changes.

Module paths are the model's own. A model whose module names differ from those of the library
the adapter was trained in passes ``key_mapping`` (regex -> replacement, applied in turn with
``re.sub``, as ``js.nn.load_weights``): from file paths to module paths when loading, from
module paths to file paths when saving. js-models' families name their modules as transformers
does and supply the mapping where they do not.

Example:
    >>> import jax.numpy as jnp, js, js.nn
    >>> from js.nn import lora
    >>> model = js.nn.Sequential(js.nn.Linear(4, 8, rngs=js.Rngs(params=0)), js.nn.ReLU())
    >>> lora.inject(model, ["0"], r=2, alpha=4)
    ['0']
    >>> [name for name, p in model.named_parameters() if p.requires_grad]
    ['0.lora_A.weight', '0.lora_B.weight']
    >>> lora.merge(model)
    ['0']
    >>> type(model[0]).__name__
    'Linear'
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import safetensors.numpy

from js import Module, ModuleDict, ModuleList, Rngs

from ._lora import LoRALinear, is_linear
from ._peft_folder import CONFIG_NAME, PREFIX, WEIGHTS_NAME, read_config, read_pairs, rename

__all__ = ["inject", "load_adapter", "merge", "save_adapter"]


def _replace(parent: Module, name: str, module: Module) -> None:
    if isinstance(parent, ModuleList):
        parent[int(name)] = module
    elif isinstance(parent, ModuleDict):
        parent[name] = module
    else:
        setattr(parent, name, module)


def _swap(model: Module, path: str, module: Module) -> None:
    """Put ``module`` at ``path`` (a dotted name of ``model.named_modules()``)."""
    parent_path, _, name = path.rpartition(".")
    parent = dict(model.named_modules())[parent_path] if parent_path else model
    _replace(parent, name, module)


def _adapters(model: Module) -> dict[str, LoRALinear]:
    return {p: m for p, m in model.named_modules() if isinstance(m, LoRALinear)}


def _freeze(model: Module) -> None:
    """Every parameter frozen but the adapters' (PEFT's ``get_peft_model``)."""
    model.requires_grad_(False)
    for layer in _adapters(model).values():
        for param in (layer.lora_A.weight, layer.lora_B.weight):
            param.requires_grad = True


def _check_targets(model: Module, targets: Sequence[str]) -> list[str]:
    """The dotted paths the patterns select, after refusing a pattern that selects nothing and
    a selected module that is not a linear layer."""
    modules = dict(model.named_modules())
    paths: list[str] = []
    for target in targets:
        matched = [p for p in modules if p and fnmatchcase(p, target)]
        if not matched:
            some = ", ".join(p for p in list(modules)[1:9])
            raise ValueError(
                f"lora.inject: target {target!r} matches no module. The model's modules are "
                f"named like: {some}, ... Fix: a pattern over model.named_modules() names, "
                "e.g. '*.q_proj'"
            )
        for path in matched:
            module = modules[path]
            if isinstance(module, LoRALinear):
                raise ValueError(
                    f"lora.inject: {path!r} already has an adapter. Fix: lora.merge(model) "
                    "first, or leave it out of targets"
                )
            if not is_linear(module):
                raise TypeError(
                    f"lora.inject: target {target!r} matches {path!r}, a "
                    f"{type(module).__name__}, not a linear layer. Fix: a narrower pattern "
                    "(LoRA adapts js.nn.Linear and fan_in_fan_out layers such as GPT-2's Conv1D)"
                )
            if path not in paths:
                paths.append(path)
    return paths


def _default_rngs(rngs: Rngs | None, dropout: float, where: str) -> Rngs:
    if rngs is None:
        if dropout > 0:
            raise ValueError(
                f"{where}: dropout={dropout} needs random keys. Fix: pass "
                "rngs=js.Rngs(params=seed, dropout=seed)"
            )
        return Rngs(params=0)
    return rngs


def inject(
    model: Module,
    targets: str | Sequence[str] = ("*.q_proj", "*.v_proj"),
    r: int = 8,
    alpha: float = 16,
    dropout: float = 0.0,
    *,
    rngs: Rngs | None = None,
    use_rslora: bool = False,
) -> list[str]:
    """Wrap every linear layer whose dotted name matches a target in a ``LoRALinear`` and
    freeze every other parameter (``requires_grad = False``).

    Args:
        model: the model, changed in place.
        targets: ``fnmatch`` patterns over the names ``model.named_modules()`` yields (PEFT's
            ``target_modules``, as patterns: ``"*.c_attn"``, ``"model.layers.0.*_proj"``).
        r: the adapters' rank.
        alpha: PEFT's ``lora_alpha`` (``scaling = alpha / r``).
        dropout: dropout on the adapters' input in training (PEFT's ``lora_dropout``).
        rngs: ``js.Rngs`` with a ``params`` stream for ``lora_A`` (default ``js.Rngs(params=0)``)
            and, with ``dropout > 0``, a ``dropout`` stream.
        use_rslora: ``scaling = alpha / sqrt(r)``.

    Returns:
        The paths of the wrapped layers, in the order the targets found them.

    Raises:
        ValueError: a target matches no module, or a matched layer has an adapter already.
        TypeError: a matched module is not a linear layer (the path and type are named).
            Nothing changes when it raises.
    """
    targets = [targets] if isinstance(targets, str) else list(targets)
    if not targets or not all(isinstance(t, str) for t in targets):
        raise TypeError(f"lora.inject: targets must be patterns (strings), got {targets!r}")
    paths = _check_targets(model, targets)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"lora.inject: dropout must be in [0, 1), got {dropout!r}")
    rngs = _default_rngs(rngs, dropout, "lora.inject")
    modules = dict(model.named_modules())
    layers = [
        LoRALinear(modules[p], r, alpha, dropout, rngs=rngs, use_rslora=use_rslora) for p in paths
    ]  # every layer built (and its arguments checked) before the model changes
    for path, layer in zip(paths, layers, strict=True):
        _swap(model, path, layer)
    _freeze(model)
    return paths


def merge(model: Module) -> list[str]:
    """Fold every adapter into its base weight (``W + B @ A * scaling``) and put the base layer,
    of its original type, back in its place. Base parameters stay frozen, as after PEFT's
    ``merge_and_unload``; ``model.requires_grad_(True)`` trains them again.

    Returns:
        The paths of the merged layers.
    """
    adapters = _adapters(model)
    for path, layer in adapters.items():
        _swap(model, path, layer.merged())
    return list(adapters)


def _target_modules(model: Module, key_mapping: Mapping[str, str] | None) -> list[str] | str:
    """PEFT's ``target_modules`` (in the file's names): the adapted layers' last names when
    these select exactly the adapted layers among the linear ones (PEFT matches by suffix),
    else a regex of their paths."""
    linear = {
        rename(p, key_mapping): isinstance(m, LoRALinear)
        for p, m in model.named_modules()
        if is_linear(m) or isinstance(m, LoRALinear)
    }
    adapted = sorted(p for p, has in linear.items() if has)
    names = sorted({p.rpartition(".")[2] for p in adapted})
    if all(has == (p.rpartition(".")[2] in names) for p, has in linear.items()):
        return names
    return "^(" + "|".join(re.escape(p) for p in adapted) + ")$"


def save_adapter(
    model: Module,
    directory: str | os.PathLike,
    *,
    key_mapping: Mapping[str, str] | None = None,
    task_type: str | None = None,
    base_model_name_or_path: str | None = None,
) -> None:
    """Write the model's adapters as PEFT's ``save_pretrained`` does: ``adapter_config.json``
    and ``adapter_model.safetensors`` (keys ``base_model.model.<path>.lora_A.weight``).

    Args:
        model: a model with adapters (``inject``/``load_adapter``), all of one ``r``, ``alpha``,
            ``dropout`` and ``use_rslora``.
        directory: the folder (created if missing).
        key_mapping: regex -> replacement from module paths to the paths of the library that
            will read the folder (none when the names agree, as for js-models' GPT-2 and Llama).
        task_type: PEFT's ``task_type`` (``"CAUSAL_LM"``, ...), written as given.
        base_model_name_or_path: written into the config as given.
    """
    adapters = _adapters(model)
    if not adapters:
        raise ValueError(
            "lora.save_adapter: the model has no adapters. Fix: lora.inject(model, ...) or "
            "lora.load_adapter(model, ...) first"
        )
    settings = {(m.r, m.alpha, m.lora_dropout.p, m.use_rslora) for m in adapters.values()}
    if len(settings) > 1:
        raise NotImplementedError(
            f"lora.save_adapter: the adapters differ in (r, alpha, dropout, use_rslora): "
            f"{sorted(settings)}; PEFT's rank_pattern/alpha_pattern are not written. Fix: "
            "inject every adapter with the same settings"
        )
    ((r, alpha, dropout, use_rslora),) = settings
    files = {path: rename(path, key_mapping) for path in adapters}
    tensors: dict[str, np.ndarray] = {}
    for path, layer in adapters.items():
        tensors[f"{PREFIX}{files[path]}.lora_A.weight"] = np.asarray(layer.lora_A.weight.value)
        tensors[f"{PREFIX}{files[path]}.lora_B.weight"] = np.asarray(layer.lora_B.weight.value)
    config = {
        "peft_type": "LORA",
        "task_type": task_type,
        "base_model_name_or_path": base_model_name_or_path,
        "r": r,
        "lora_alpha": alpha,
        "lora_dropout": dropout,
        "target_modules": _target_modules(model, key_mapping),
        "fan_in_fan_out": any(m.fan_in_fan_out for m in adapters.values()),
        "bias": "none",
        "use_rslora": use_rslora,
        "use_dora": False,
        "modules_to_save": None,
        "init_lora_weights": True,
        "rank_pattern": {},
        "alpha_pattern": {},
        "inference_mode": True,
    }
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    safetensors.numpy.save_file(tensors, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _check_places(model: Module, pairs: dict[str, dict[str, np.ndarray]], config: dict) -> None:
    modules = dict(model.named_modules())
    adapters = _adapters(model)
    problems = []
    if adapters and sorted(adapters) != sorted(pairs):
        problems.append(
            f"the model's adapters are at {sorted(adapters)}, the file's at {sorted(pairs)}"
        )
    for path, pair in pairs.items():
        module = modules.get(path)
        if module is None:
            problems.append(f"{path!r}: no such module")
            continue
        if not (is_linear(module) or isinstance(module, LoRALinear)):
            problems.append(f"{path!r}: a {type(module).__name__}, not a linear layer")
            continue
        shape = module.weight.value.shape  # type: ignore[union-attr]
        in_out = shape if getattr(module, "fan_in_fan_out", False) else shape[::-1]
        got = (pair["lora_A"].shape[1], pair["lora_B"].shape[0])
        if got != tuple(in_out):
            problems.append(
                f"{path!r}: the layer maps {in_out[0]} -> {in_out[1]}, the adapter "
                f"{got[0]} -> {got[1]}"
            )
        if isinstance(module, LoRALinear) and (module.r, module.alpha) != (
            config["r"],
            config["lora_alpha"],
        ):
            problems.append(
                f"{path!r}: the layer has r={module.r}, alpha={module.alpha}; the "
                f"config r={config['r']}, lora_alpha={config['lora_alpha']}"
            )
    if problems:
        raise ValueError(
            "lora.load_adapter: the adapter does not fit the model: "
            + "; ".join(problems)
            + ". Fix: the model the adapter was trained on (and key_mapping if its module "
            "names differ)"
        )


def load_adapter(
    model: Module,
    directory: str | os.PathLike,
    *,
    key_mapping: Mapping[str, str] | None = None,
    rngs: Rngs | None = None,
) -> list[str]:
    """Load a PEFT LoRA folder (``adapter_config.json``, ``adapter_model.safetensors``).

    A model without adapters gets them where the file's keys say, with the config's ``r``,
    ``lora_alpha``, ``lora_dropout`` and ``use_rslora``, and its other parameters frozen; a
    model with adapters must have them at exactly those paths, of the same rank and alpha.

    Args:
        model: the base model the adapter was trained on, changed in place.
        directory: the adapter folder.
        key_mapping: regex -> replacement from the file's module paths to the model's.
        rngs: for dropout in training (``lora_dropout > 0``); a ``dropout`` stream.

    Returns:
        The adapted paths.

    Raises:
        NotImplementedError: the config asks for what js does not implement (DoRA,
            rank_pattern/alpha_pattern, bias other than "none", modules_to_save, ...).
        KeyError, ValueError: keys that are no LoRA weights, or do not fit the model.
            Nothing changes when it raises.
    """
    folder = Path(directory)
    config = read_config(folder)
    pairs = read_pairs(folder, config, key_mapping)
    _check_places(model, pairs, config)
    if not _adapters(model):
        modules = dict(model.named_modules())
        dropout = float(config.get("lora_dropout") or 0.0)
        rngs = Rngs(params=0) if rngs is None else rngs
        for path in pairs:
            layer = LoRALinear(
                modules[path],
                config["r"],
                config["lora_alpha"],
                dropout,
                rngs=rngs,
                use_rslora=bool(config.get("use_rslora")),
            )
            _swap(model, path, layer)
        _freeze(model)
    adapters = _adapters(model)
    for path, pair in pairs.items():
        layer = adapters[path]
        for name in ("lora_A", "lora_B"):
            weight = getattr(layer, name).weight
            weight.value = jnp.asarray(pair[name], weight.value.dtype)
    return list(pairs)
