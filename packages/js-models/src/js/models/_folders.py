"""Finding and reading a model folder: its ``config.json``, and the js-models class it names.

A folder is either transformers' (``config.json`` with ``model_type`` and ``architectures``;
``model.safetensors`` or ``model.safetensors.index.json`` with its shards) or timm's
(``config.json`` with ``architecture``; ``model.safetensors``). ``_registry.py`` maps each to
the family module that implements it.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Protocol

from ._registry import MODEL_TYPES, TIMM_PREFIXES


class FamilyModel(Protocol):
    """What loading and saving read of a family's model class. ``_base.PreTrainedModel`` has
    all of it; it calls ``_pretrained``'s loader, so the loading modules describe it instead of
    importing it back."""

    config_class: ClassVar[type[Any]]  # a PretrainedConfig: model_type, from_dict
    base_model_prefix: ClassVar[str]
    key_mapping: ClassVar[dict[str, str]]
    save_key_mapping: ClassVar[dict[str, str]]
    ignore_on_load: ClassVar[tuple[str, ...]]

    @classmethod
    def weights_view(cls, weights: Any) -> Any: ...

    def _config_json(self) -> dict[str, Any]: ...

    def _state_variables(self) -> Mapping[str, Any]: ...


CONFIG_NAME = "config.json"


def _folder(path: str | os.PathLike) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"from_pretrained: path must be a folder path (str or os.PathLike), got "
            f"{type(path).__name__}. Fix: pass the folder save_pretrained wrote"
        )
    folder = Path(path)
    if not folder.exists():
        raise FileNotFoundError(
            f"from_pretrained: {folder} does not exist. Nothing is downloaded: fix: pass a local "
            "folder holding config.json and model.safetensors (e.g. one huggingface_hub's "
            "snapshot_download or save_pretrained wrote)"
        )
    if not folder.is_dir():
        raise NotADirectoryError(
            f"from_pretrained: {folder} is a file, not a model folder. Fix: pass the folder that "
            "holds config.json and model.safetensors (for a bare weight file, build the model "
            "and use js.nn.load_weights)"
        )
    return folder


def _read_config(folder: Path) -> dict[str, Any]:
    file = folder / CONFIG_NAME
    if not file.is_file():
        raise FileNotFoundError(
            f"from_pretrained: {folder} has no {CONFIG_NAME}, which names the model family and "
            "its sizes. Fix: pass the folder save_pretrained wrote (transformers or timm)"
        )
    try:
        config = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(
            f"from_pretrained: {file} is not valid JSON ({error}). Fix: write it again"
        ) from None
    if not isinstance(config, dict):
        raise ValueError(f"from_pretrained: {file} holds a {type(config).__name__}, not an object")
    return config


def _supported() -> str:
    return (
        f"transformers model_type one of {sorted(MODEL_TYPES)}; timm architectures starting "
        f"with one of {sorted(TIMM_PREFIXES)}"
    )


def _family(config: Mapping[str, Any], folder: Path) -> tuple[str, str, str]:
    """``(family module, architecture name or "", "transformers"|"timm")`` of a config."""
    if "model_type" in config:
        model_type = config["model_type"]
        if model_type not in MODEL_TYPES:
            raise ValueError(
                f"from_pretrained: {folder / CONFIG_NAME} has model_type {model_type!r}, which "
                f"js.models does not implement. Supported: {_supported()}"
            )
        architectures = config.get("architectures") or [""]
        return MODEL_TYPES[model_type], str(architectures[0]), "transformers"
    if "architecture" in config:
        name = str(config["architecture"])
        prefixes = sorted((p for p in TIMM_PREFIXES if name.startswith(p)), key=len)
        if not prefixes:
            raise ValueError(
                f"from_pretrained: {folder / CONFIG_NAME} names the timm architecture {name!r}, "
                f"which js.models does not implement. Supported: {_supported()}"
            )
        return TIMM_PREFIXES[prefixes[-1]], name, "timm"
    raise ValueError(
        f"from_pretrained: {folder / CONFIG_NAME} has neither 'model_type' (transformers) nor "
        "'architecture' (timm), so its family is unknown. Fix: pass a folder transformers' or "
        "timm's save_pretrained wrote"
    )


def _module(name: str, folder: Path) -> ModuleType:
    try:
        return importlib.import_module(f"js.models.{name}")
    except ImportError as error:
        raise ValueError(
            f"from_pretrained: {folder} is a {name} model, but js.models.{name} cannot be "
            f"imported ({error}). Fix: install a js-models release that has it"
        ) from None


def _class_of(config: Mapping[str, Any], folder: Path) -> type[FamilyModel]:
    family, name, kind = _family(config, folder)
    module = _module(family, folder)
    classes: dict[str, Any] = module.ARCHITECTURES
    default = getattr(module, "DEFAULT_ARCHITECTURE", None) or next(iter(classes))
    name = name or default
    if name not in classes:
        what = "architectures[0]" if kind == "transformers" else "architecture"
        raise ValueError(
            f"from_pretrained: {folder / CONFIG_NAME} has {what} {name!r}, which js.models."
            f"{family} does not implement; it has {sorted(classes)}. Fix: load one of those "
            f"with its own from_pretrained (e.g. js.models.{family}."
            f"{default}.from_pretrained(path) takes what it can use)"
        )
    return classes[name]


def _check_class(cls: type[FamilyModel], config: Mapping[str, Any], folder: Path) -> None:
    if cls.config_class.model_type and cls.config_class.model_type == config.get("model_type"):
        return  # the class's own kind of folder (also a family outside the registry)
    family, name, _ = _family(config, folder)
    own = cls.__module__.rsplit(".", 1)[-1]
    if own != family:
        found = config.get("model_type") or name
        raise ValueError(
            f"{cls.__name__}.from_pretrained: {folder} holds a {found!r} model "
            f"(js.models.{family}), not a {cls.config_class.model_type or own!r} one. Fix: "
            f"js.models.from_pretrained(path) picks the class for the folder"
        )
