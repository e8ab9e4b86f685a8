"""What the timm families (``resnet.py``, ``convnext.py``) share: timm's ``config.json``, the
model skeleton (``TimmModel``: build, timm's initial weights, ``forward_features`` then
``forward_head``), the module's ``ARCHITECTURES`` and the classifier heads' global pooling.

timm 1.0.31's ``save_for_hf`` (``timm/models/_hub.py``) writes::

    {"architecture": "resnet18", "num_classes": 10, "num_features": 512, "global_pool": "avg",
     "model_args": {"num_classes": 10, "in_chans": 3, "global_pool": "avg"},
     "pretrained_cfg": {"input_size": [3, 224, 224], "mean": [...], "std": [...], ...}}

and ``timm.create_model("local-dir:<folder>", pretrained=True)`` reads it back: the
architecture names the registered constructor (``resnet18`` -> BasicBlock, layers (2, 2, 2, 2)),
``model_args`` are its keyword arguments (they win over the top-level keys), ``pretrained_cfg``
describes preprocessing. ``TimmConfig`` keeps that layout, so ``to_dict()`` is timm's file.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

import js
from js import nn

from ._base import PretrainedConfig, PreTrainedModel

IMAGENET_DEFAULT_MEAN = [0.485, 0.456, 0.406]
IMAGENET_DEFAULT_STD = [0.229, 0.224, 0.225]
# model_args timm records that change training only (timm drops them from exports itself).
_TRAINING_ONLY = ("drop_rate", "drop_path_rate", "drop_block_rate")
# model_args every timm constructor takes (a family's model_arg_names adds its own).
_COMMON_ARGS = ("num_classes", "in_chans", "global_pool")
# timm's SelectAdaptivePool2d pool types -> how many features per channel they give.
POOL_TYPES = {"": 1, "avg": 1, "max": 1, "avgmax": 1, "catavgmax": 2}


def default_cfg(*, first_conv: str, classifier: str, **changes: Any) -> dict[str, Any]:
    """timm's ``_cfg()`` of a family: the ``pretrained_cfg`` a config made in js writes
    (ImageNet's 224x224 preprocessing), ``changes`` updating its keys.

    Example:
        >>> default_cfg(first_conv="conv1", classifier="fc", crop_pct=0.95)["crop_pct"]
        0.95
    """
    return {
        "input_size": [3, 224, 224],
        "pool_size": [7, 7],
        "crop_pct": 0.875,
        "interpolation": "bilinear",
        "mean": IMAGENET_DEFAULT_MEAN,
        "std": IMAGENET_DEFAULT_STD,
        "first_conv": first_conv,
        "classifier": classifier,
    } | changes


class TimmConfig(PretrainedConfig):
    """A timm ``config.json``: ``architecture``, ``num_classes``, ``global_pool``,
    ``model_args`` and ``pretrained_cfg`` as attributes, written back in timm's layout.

    Subclasses set ``architectures`` (timm's architecture name -> its constructor's arguments),
    ``model_arg_names`` (the ``model_args`` keys this family builds from, besides
    ``num_classes``, ``in_chans`` and ``global_pool``, which every family takes) and
    ``pretrained_defaults`` (timm's ``_cfg()`` for the family, written for a config made in js).
    """

    model_type: ClassVar[str] = ""  # timm's files have no model_type
    defaults: ClassVar[dict[str, Any]] = {"num_classes": 1000, "global_pool": "avg"}
    # the global_pool values the family's head takes (the CNNs': SelectAdaptivePool2d's)
    pool_types: ClassVar[tuple[str, ...]] = tuple(POOL_TYPES)
    architectures: ClassVar[dict[str, dict[str, Any]]] = {}
    default_architecture: ClassVar[str] = ""
    model_arg_names: ClassVar[tuple[str, ...]] = ()
    pretrained_defaults: ClassVar[dict[str, Any]] = {}
    # config.json keys every timm family reads (set by __init__)
    architecture: str
    num_classes: int
    global_pool: str

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("architecture", self.default_architecture)
        name = kwargs["architecture"]
        if name not in self.architectures:
            raise ValueError(
                f"{type(self).__name__}: unknown timm architecture {name!r}; supported: "
                f"{sorted(self.architectures)}. Fix: pass one of those as architecture="
            )
        model_args = dict(kwargs.get("model_args") or {})
        known = {*_COMMON_ARGS, *self.model_arg_names}
        unknown = sorted(set(model_args) - known - set(_TRAINING_ONLY))
        if unknown:
            raise NotImplementedError(
                f"{type(self).__name__}: model_args {unknown} of {name!r} are not supported; "
                f"js builds {name} from {sorted(known)}. Fix: export the timm model without "
                "them, or remove them from config.json if they are defaults"
            )
        # timm passes model_args as the constructor's keyword arguments: they win.
        for key in ("num_classes", "global_pool"):
            if key in model_args:
                kwargs[key] = model_args[key]
        super().__init__(**kwargs)
        if self.global_pool not in self.pool_types:
            raise ValueError(
                f"{type(self).__name__}: global_pool {self.global_pool!r} is not one of "
                f"{sorted(self.pool_types)}. Fix: pass "
                f"global_pool={self.defaults['global_pool']!r}"
            )

    def arch_args(self) -> dict[str, Any]:
        """The constructor's arguments: the architecture's, then ``model_args`` over them."""
        model_args = getattr(self, "model_args", None) or {}
        args = {**copy.deepcopy(self.architectures[self.architecture]), **model_args}
        args["num_classes"], args["global_pool"] = self.num_classes, self.global_pool
        args["in_chans"] = model_args.get("in_chans", self._input_channels())
        for key in _TRAINING_ONLY:
            args.pop(key, None)
        return args

    def _input_channels(self) -> int:
        pretrained_cfg = getattr(self, "pretrained_cfg", None) or {}
        return int(pretrained_cfg.get("input_size", (3,))[0])

    def feature_count(self) -> int:
        """timm's ``num_features``: the channels of the last feature map (before pooling)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """timm's ``config.json`` (the keys in ``save_for_hf``'s order, then any others), with
        ``num_features``, ``model_args`` and ``pretrained_cfg`` agreeing with the config."""
        values = super().to_dict()
        model_args = dict(values.pop("model_args", None) or {})
        model_args.update(num_classes=self.num_classes, global_pool=self.global_pool)
        model_args.setdefault("in_chans", self._input_channels())
        pretrained_cfg = values.pop("pretrained_cfg", None)
        if pretrained_cfg is None:
            pretrained_cfg = copy.deepcopy(self.pretrained_defaults)
            pretrained_cfg["input_size"] = [model_args["in_chans"], 224, 224]
        pretrained_cfg["num_classes"] = self.num_classes
        head = {
            "architecture": values.pop("architecture"),
            "num_classes": values.pop("num_classes"),
            "num_features": self.feature_count(),
            "global_pool": values.pop("global_pool"),
        }
        values.pop("num_features", None)
        if not head["global_pool"]:
            del head["global_pool"]  # timm writes it only when pooling
        return {**head, "model_args": model_args, "pretrained_cfg": pretrained_cfg, **values}

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> TimmConfig:
        """The config of a timm ``config.json`` mapping (older single-dict files included:
        timm's legacy layout keeps everything but ``architecture`` in ``pretrained_cfg``)."""
        config = copy.deepcopy(dict(config))
        if "pretrained_cfg" not in config and "architecture" in config:
            architecture = config.pop("architecture")
            num_features = config.pop("num_features", None)
            config = {
                "architecture": architecture,
                "num_classes": config.get("num_classes", 1000),
                "pretrained_cfg": config,
                **({} if num_features is None else {"num_features": num_features}),
            }
        return cls(**config)


def trunc_normal_init(self: Any, module: nn.Module, rngs: js.Rngs) -> None:
    """A ``TimmModel._init_module`` (ConvNeXt's, ViT's): truncated normal (std 0.02) for convs
    and Linear layers; their biases stay zero."""
    if isinstance(module, (nn.Conv2d, nn.Linear)):
        nn.init.trunc_normal_(module.weight, std=0.02, rngs=rngs)


class TimmModel(PreTrainedModel):
    """A timm family's model: no base-model prefix, timm's ``config.json`` layout on save,
    BatchNorm's ``num_batches_tracked`` counters (which js does not keep; PyTorch sets them to
    0 when a file lacks them) skipped on load, and timm's skeleton, a family writing its parts:
    ``_build`` (the layers, from ``config.arch_args()``), ``_init_module`` (timm's random
    initial weights, module by module), ``forward_features`` and ``forward_head``, with
    ``forward(x) = forward_head(forward_features(x))``.

    Args:
        config: the family's ``TimmConfig`` (timm's ``config.json``).
        rngs: ``js.Rngs`` with ``params``, for the random initial weights.
    """

    config_class: ClassVar[type[TimmConfig]] = TimmConfig
    base_model_prefix: ClassVar[str] = ""
    ignore_on_load: ClassVar[tuple[str, ...]] = (r"(^|\.)num_batches_tracked$",)
    config: TimmConfig

    def __init__(self, config: TimmConfig, *, rngs: js.Rngs):
        super().__init__(config)
        self.num_classes = config.num_classes
        self._build(config.arch_args(), rngs)
        for module in self.modules():  # timm's named_apply(_init_weights) order
            self._init_module(module, rngs)

    def _build(self, args: dict[str, Any], rngs: js.Rngs) -> None:
        """Builds the layers with timm's names from the constructor's arguments."""
        raise NotImplementedError(f"{type(self).__name__} does not define _build")

    def _init_module(self, module: nn.Module, rngs: js.Rngs) -> None:
        """Gives ``module`` (each of the model's in turn) timm's initial weights."""
        raise NotImplementedError(f"{type(self).__name__} does not define _init_module")

    def _config_json(self) -> dict[str, Any]:
        """timm's ``config.json`` (``architecture``, ``num_classes``, ``num_features``,
        ``global_pool``, ``model_args``, ``pretrained_cfg``), not transformers' layout."""
        return self.config.to_dict()

    def forward_features(self, x: jax.Array) -> jax.Array:
        """The last feature map ``[B, num_features, H / 32, W / 32]`` of images ``[B, C, H, W]``."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward_features")

    def forward_head(self, x: jax.Array, pre_logits: bool = False) -> jax.Array:
        """The classifier on a feature map: logits ``[B, num_classes]``, or with ``pre_logits``
        the pooled features ``[B, num_features]`` the last layer reads; by default the family's
        ``head`` module (as timm's ``ClassifierHead`` and ``NormMlpClassifierHead``)."""
        head = getattr(self, "head", None)
        if head is None:
            raise NotImplementedError(f"{type(self).__name__} does not define forward_head")
        return head(x, pre_logits=pre_logits)

    def forward(self, pixel_values: jax.Array) -> jax.Array:
        """Logits ``[B, num_classes]`` of images ``[B, C, H, W]`` (features if no head), as
        timm's ``forward_head(forward_features(x))``.

        Example:
            >>> import jax.numpy as jnp, js
            >>> from js.models.resnet import ResNetConfig, ResNetModel
            >>> config = ResNetConfig(architecture="resnet18", num_classes=10, model_args={
            ...     "layers": [1, 1, 1, 1], "channels": [8, 8, 8, 8]})
            >>> model = ResNetModel(config, rngs=js.Rngs(params=0)).eval()
            >>> forward = js.jit(lambda model, pixels: model(pixels))  # one compiled program
            >>> forward(model, jnp.ones((2, 3, 32, 32))).shape
            (2, 10)
        """
        return self.forward_head(self.forward_features(pixel_values))


def timm_architectures(model: type[TimmModel]) -> dict[str, type[PreTrainedModel]]:
    """A timm family module's ``ARCHITECTURES``: every architecture its config registers (timm's
    names, ``config.json``'s ``architecture``) -> ``model``."""
    return dict.fromkeys(model.config_class.architectures, model)


def global_pool(x: jax.Array, pool_type: str) -> jax.Array:
    """timm's ``SelectAdaptivePool2d(pool_type, flatten=True)`` on ``[B, C, H, W]``: ``[B, C]``
    (``[B, 2C]`` for ``'catavgmax'``); ``''`` keeps the map as it is."""
    if not pool_type:
        return x
    avg = jnp.mean(x, axis=(2, 3))
    top = jnp.max(x, axis=(2, 3))
    pooled = {"avg": avg, "max": top, "avgmax": 0.5 * (avg + top)}
    if pool_type == "catavgmax":
        return jnp.concatenate([avg, top], axis=1)
    return pooled[pool_type]


def classify(x: jax.Array, pool_type: str, fc: nn.Module, pre_logits: bool = False) -> jax.Array:
    """timm's classifier on a feature map ``[B, C, H, W]``: ``global_pool``, then ``fc`` unless
    ``pre_logits``."""
    x = global_pool(x, pool_type)
    return x if pre_logits else fc(x)


class ClassifierHead(nn.Module):
    """timm's ``ClassifierHead``: ``fc(global_pool(x))``, ``fc`` a Linear layer on the pooled
    features (``Identity`` for ``num_classes=0``).

    Args:
        features: the feature map's channels. num_classes: the logits.
        pool_type: timm's ``global_pool`` (see ``POOL_TYPES``). rngs: ``js.Rngs`` with ``params``.

    Shape:
        ``[B, features, H, W]`` -> ``[B, num_classes]``.
    """

    def __init__(self, features: int, num_classes: int, pool_type: str, *, rngs: js.Rngs):
        super().__init__()
        self.pool_type = pool_type
        pooled = features * POOL_TYPES[pool_type]
        self.fc = nn.Linear(pooled, num_classes, rngs=rngs) if num_classes > 0 else nn.Identity()

    def forward(self, x: jax.Array, pre_logits: bool = False) -> jax.Array:
        """Logits, or with ``pre_logits`` the pooled features."""
        return classify(x, self.pool_type, self.fc, pre_logits)


__all__ = [
    "IMAGENET_DEFAULT_MEAN",
    "IMAGENET_DEFAULT_STD",
    "ClassifierHead",
    "TimmConfig",
    "TimmModel",
    "classify",
    "default_cfg",
    "global_pool",
    "timm_architectures",
]
