"""What every js-models family builds on: a config read from ``config.json``, and a model that
comes from, and goes back to, a model folder.

A family module (``gpt2.py``, ``llama.py``, ...) subclasses both:

- ``PretrainedConfig``: ``model_type`` and ``defaults`` (transformers' defaults for every key
  the family reads). Keys of the file the family does not read are kept and written back.
- ``PreTrainedModel``: ``config_class``, ``base_model_prefix`` (transformers': ``"transformer"``
  for GPT-2, ``"model"`` for Llama, ``"bert"``, ``"vit"``; ``""`` for timm), ``key_mapping``
  (regex -> replacement from the file's names to the module's, transformers 5.23's rules as
  ``js.nn.load_weights(key_mapping=)`` applies them: every rule in turn), optionally
  ``save_key_mapping`` (the reverse, for ``save_pretrained``), ``ignore_on_load`` (file names
  skipped silently) and ``_config_json()`` (what ``config.json`` holds; timm families write
  timm's layout), and ``__init__(self, config, *, rngs)``.
  Module attribute names follow the source library, so most files load without any renaming.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from js import nn

from ._pretrained import from_pretrained, load_pretrained, save_pretrained

# transformers 5.23's defaults of every config key a family reads and writes, by model_type:
# data (checked against transformers' config classes by the tests), filled in as the
# ``defaults`` of a config class that sets its ``model_type`` and no ``defaults`` of its own.
_TRANSFORMERS_DEFAULTS: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parent / "transformers_defaults.json").read_text()
)


class PretrainedConfig:
    """A model's configuration: ``config.json``'s keys as attributes.

    Example:
        >>> class TinyConfig(PretrainedConfig):
        ...     model_type = "tiny"
        ...     defaults = {"hidden_size": 8}
        >>> TinyConfig(vocab_size=3).to_dict()["hidden_size"]
        8
    """

    model_type: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    # transformers' aliases: a read or write of the alias goes to the key (GPT-2's
    # ``hidden_size`` is its ``n_embd``).
    attribute_map: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "defaults" not in vars(cls) and cls.model_type in _TRANSFORMERS_DEFAULTS:
            cls.defaults = _TRANSFORMERS_DEFAULTS[cls.model_type]

    def __init__(self, **kwargs: Any):
        for key, value in {**copy.deepcopy(self.defaults), **kwargs}.items():
            setattr(self, key, value)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(type(self).attribute_map.get(name, name), value)

    def __getattr__(self, name: str) -> Any:
        # only reached when ``name`` is not an attribute: an alias, or an unknown key
        target = type(self).attribute_map.get(name)
        if target is None:
            raise AttributeError(
                f"{type(self).__name__} has no key {name!r}. Fix: add it to config.json, or "
                f"pass it to {type(self).__name__}({name}=...)"
            )
        return getattr(self, target)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> Self:
        """The config of a ``config.json`` mapping (unknown keys kept as attributes)."""
        return cls(**dict(config))

    def to_dict(self) -> dict[str, Any]:
        """Every key, ready for ``json.dump``, with this family's ``model_type``."""
        values = copy.deepcopy(vars(self))
        if self.model_type:
            values["model_type"] = self.model_type
        return values

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value!r}" for key, value in vars(self).items())
        return f"{type(self).__name__}({fields})"


class PreTrainedModel(nn.Module):
    """A js.nn model with ``from_pretrained`` and ``save_pretrained``, as in transformers."""

    config_class: ClassVar[type[PretrainedConfig]] = PretrainedConfig
    base_model_prefix: ClassVar[str] = ""
    key_mapping: ClassVar[dict[str, str]] = {}
    # The reverse of ``key_mapping`` for ``save_pretrained`` (module-name regex -> file name),
    # for families whose files keep older names than their modules (ViT).
    save_key_mapping: ClassVar[dict[str, str]] = {}
    # Regexes (``re.search``) of file names to skip silently on load when the model has no
    # place for them: buffers older files carry that the model computes instead (transformers'
    # ``_keys_to_ignore_on_load_unexpected``, same semantics).
    ignore_on_load: ClassVar[tuple[str, ...]] = ()
    # Module paths -> transformers' own module names, for the keys of LoRA adapter folders
    # (PEFT names adapters by the live module, not by the file): the reverse of ``key_mapping``
    # where the modules are named as older files are (ViT).
    adapter_key_mapping: ClassVar[dict[str, str]] = {}

    def __init__(self, config: PretrainedConfig):
        super().__init__()
        self.config = config

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **options: Any) -> Self:
        """This class, built from ``path``'s ``config.json`` and filled from its weights.

        ``options`` are ``js.models.from_pretrained``'s (``dtype``, ``strict``, ``mesh``,
        ``rules``); an unknown one is refused by name.
        """
        try:
            call = inspect.signature(from_pretrained).bind(path, **options)
        except TypeError as error:
            raise TypeError(f"{cls.__name__}.from_pretrained: {error}") from None
        call.apply_defaults()
        own = None if cls is PreTrainedModel else cls  # the base class: the folder's own class
        return load_pretrained(own, **call.arguments)

    @classmethod
    def weights_view(cls, weights: Any) -> Any:
        """The folder's tensors as this class reads them (an object with ``shapes``,
        ``dtypes``, ``read(key, index=None)`` and ``close()``, as the loader's ``_Weights``):
        unchanged here. The mixture-of-experts families present the per-expert tensors of
        transformers' files stacked (``_moe.ExpertStacks``)."""
        return weights

    def _config_json(self) -> dict[str, Any]:
        """What ``save_pretrained`` writes as ``config.json``: transformers' layout (the config's
        keys and ``architectures``). timm families override it with timm's layout."""
        return {**self.config.to_dict(), "architectures": [type(self).__name__]}

    def load_adapter(self, path: str | os.PathLike, *, rngs: Any = None) -> list[str]:
        """Load a Hugging Face PEFT LoRA folder onto this model (``js.nn.lora.load_adapter``
        with this family's module names); returns the adapted paths."""
        return nn.lora.load_adapter(self, path, key_mapping=self.key_mapping, rngs=rngs)

    def save_adapter(self, path: str | os.PathLike, *, task_type: str | None = None) -> None:
        """Write this model's LoRA adapters as PEFT's ``save_pretrained`` does, in the module
        names of the transformers model PEFT would wrap (``js.nn.lora.save_adapter``)."""
        nn.lora.save_adapter(self, path, key_mapping=self.adapter_key_mapping, task_type=task_type)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write ``config.json`` and ``model.safetensors`` to ``path`` in the source library's
        names and layouts, so that its own loader reads the folder."""
        save_pretrained(self, path)


def architectures(*classes: type[PreTrainedModel]) -> dict[str, type[PreTrainedModel]]:
    """A family module's ``ARCHITECTURES``: each class under its own (transformers') name; the
    first serves a folder whose ``config.json`` names no architecture."""
    return {cls.__name__: cls for cls in classes}


__all__ = ["PreTrainedModel", "PretrainedConfig", "architectures"]
