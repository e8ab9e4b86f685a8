"""Images to ``pixel_values``: a folder's ``preprocessor_config.json`` (transformers) or its
timm ``pretrained_cfg``, run with Pillow and NumPy.

Every image becomes a ``[H, W, C]`` uint8 array first, is resized by Pillow (as both
transformers' slow image processors and torchvision do for PIL images, so resized pixels are
Pillow's own), cropped, made float32 and normalised. The two dialects differ only where their
sources do, and :class:`ImageProcessor` (transformers) and ``_TimmImageProcessor`` (timm) say
where: transformers rescales in float64 (``x * 1/255``) and crops at ``(H - h) // 2``;
torchvision's ``ToTensor`` divides in float32 and ``CenterCrop`` rounds ``(H - h) / 2``.
Pillow is imported on first use (the ``js-models[vision]`` extra).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ImageProcessor"]

PREPROCESSOR_NAME = "preprocessor_config.json"
_STANDARD = [0.5, 0.5, 0.5]  # transformers' IMAGENET_STANDARD_MEAN and _STD
_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
_SQUARE_224 = {"height": 224, "width": 224}
_CROPPED_224 = {"size": {"shortest_edge": 224}, "crop_size": _SQUARE_224, "do_center_crop": True}
_BASE = {"do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True}
# transformers' class attributes of each slow processor (models/*/image_processing_pil_*.py),
# the values a preprocessor_config.json leaves out; resample is PIL's (2 bilinear, 3 bicubic).
_DEFAULTS: dict[str, dict[str, Any]] = {
    "ViTImageProcessor": {"resample": 2, "size": _SQUARE_224},
    "CLIPImageProcessor": {"resample": 3, **_CROPPED_224, "do_convert_rgb": True},
    "SiglipImageProcessor": {"resample": 3, "size": _SQUARE_224, "do_convert_rgb": True},
    "BitImageProcessor": {"resample": 3, **_CROPPED_224, "do_convert_rgb": True},
    "ConvNextImageProcessor": {"resample": 3, "size": {"shortest_edge": 384}, "crop_pct": 0.875},
}
_OPENAI = ("CLIPImageProcessor", "BitImageProcessor")
_SQUARE_INT_SIZE = ("ViTImageProcessor",)  # default_to_square: an int size is (size, size)
# timm's resolve_data_config defaults, and its interpolation names as PIL's numbers
_TIMM_DEFAULTS = {
    "input_size": [3, 224, 224],
    "interpolation": "bicubic",
    "crop_pct": 0.875,
    "crop_mode": "center",
    "mean": [0.485, 0.456, 0.406],
    "std": [0.229, 0.224, 0.225],
}
_TIMM_RESAMPLE = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}

ImageInput = Any  # a PIL.Image.Image, a uint8 [H, W] / [H, W, C] array, or a sequence of them


def _pil() -> Any:
    """``PIL.Image``, imported on first use: Pillow is the ``vision`` extra, which token-only
    and array-only users of js-models do not install."""
    try:
        from PIL import Image  # pyright: ignore[reportMissingImports]
    except ImportError:
        raise ImportError(
            "ImageProcessor needs Pillow to resize images, which is not installed. "
            'Fix: pip install "js-models[vision]"'
        ) from None
    return Image


def _size_dict(value: Any, square: bool, name: str) -> dict[str, int]:
    """transformers' ``get_size_dict``: an int is ``(n, n)`` when ``square`` else a shortest
    edge, a pair is ``(height, width)``."""
    if isinstance(value, int):
        return {"height": value, "width": value} if square else {"shortest_edge": value}
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return {"height": int(value[0]), "width": int(value[1])}
    if isinstance(value, Mapping) and set(value) in ({"height", "width"}, {"shortest_edge"}):
        return {key: int(n) for key, n in value.items()}
    raise NotImplementedError(
        f"ImageProcessor: {name} {value!r} is not supported: expected an int, [height, width], "
        '{"height": h, "width": w} or {"shortest_edge": n}'
    )


def _processor_type(config: Mapping[str, Any]) -> str:
    name = config.get("image_processor_type") or str(config.get("feature_extractor_type", ""))
    name = name.replace("FeatureExtractor", "ImageProcessor")
    name = name.removesuffix("Fast").removesuffix("Pil")
    if name not in _DEFAULTS:
        raise NotImplementedError(
            f"ImageProcessor: image_processor_type {name or None!r} is not supported. "
            f"Supported: {sorted(_DEFAULTS)} (transformers' slow processors) and timm folders"
        )
    return name


def _crop_or_pad(image: np.ndarray, height: int, width: int, top: int, left: int, fill: Any):
    """``image[top:top + height, left:left + width]``, with ``fill`` where that leaves it."""
    out = np.empty((height, width, image.shape[2]), image.dtype)
    out[...] = np.asarray(fill, image.dtype)
    bottom, right = min(top + height, image.shape[0]), min(left + width, image.shape[1])
    inside = image[max(top, 0) : bottom, max(left, 0) : right]
    out[max(-top, 0) : bottom - top, max(-left, 0) : right - left] = inside
    return out


class ImageProcessor:
    """Images to a model's ``pixel_values`` as transformers' slow (Pillow) image processor of a
    folder computes them (``ViTImageProcessor``, ``CLIPImageProcessor``, ``SiglipImageProcessor``,
    ``BitImageProcessor`` (DINOv2), ``ConvNextImageProcessor``; transformers 5 names the slow
    ones ``...ImageProcessorPil``), or, for a timm folder, as timm's eval transform does;
    ``from_pretrained`` picks which.

    Each image: RGB conversion (``do_convert_rgb``: transparency composited onto white), resize
    with ``resample`` (``size``: ``{"height", "width"}``, or ``{"shortest_edge"}`` keeping the
    aspect ratio; ConvNeXt below 384 resizes to ``shortest_edge / crop_pct`` and crops), centre
    crop to ``crop_size``, ``* rescale_factor``, ``(x - image_mean) / image_std``.

    Args:
        config: ``preprocessor_config.json``'s keys; a key it leaves out takes the default of
            its ``image_processor_type``.

    Shape:
        ``processor(images)["pixel_values"]``: float32 ``[B, C, H, W]`` from PIL images or
        uint8 ``[H, W]``/``[H, W, C]`` arrays, one or a list.

    Example:
        >>> import numpy as np
        >>> from js.models import ImageProcessor
        >>> processor = ImageProcessor({"image_processor_type": "ViTImageProcessor",
        ...                             "size": {"height": 32, "width": 32}})
        >>> image = np.zeros((37, 53, 3), np.uint8)
        >>> processor(image)["pixel_values"].shape
        (1, 3, 32, 32)
        >>> float(processor([image, image + 255])["pixel_values"][1, 0, 0, 0])
        1.0
    """

    def __init__(self, config: Mapping[str, Any]):
        self.config = self._resolve(dict(config))

    @staticmethod
    def _resolve(config: dict[str, Any]) -> dict[str, Any]:
        kind = _processor_type(config)
        mean = _CLIP_MEAN if kind in _OPENAI else _STANDARD
        defaults = {
            **_BASE,
            "image_mean": mean,
            "image_std": _CLIP_STD if kind in _OPENAI else mean,
        }
        given = {key: value for key, value in config.items() if value is not None}
        resolved = {**defaults, **_DEFAULTS[kind], **given, "image_processor_type": kind}
        resolved["size"] = _size_dict(resolved["size"], kind in _SQUARE_INT_SIZE, "size")
        if "crop_size" in resolved:
            resolved["crop_size"] = _size_dict(resolved["crop_size"], True, "crop_size")
        elif resolved.get("do_center_crop"):
            raise ValueError(
                f"ImageProcessor: do_center_crop is set but crop_size is not ({kind}). Fix: set "
                'crop_size {"height": h, "width": w}, or do_center_crop false'
            )
        if kind == "ConvNextImageProcessor" and "shortest_edge" not in resolved["size"]:
            raise ValueError(
                f"ImageProcessor: ConvNextImageProcessor needs size {{'shortest_edge': n}}, got "
                f"{resolved['size']}. Fix: set size to {{'shortest_edge': 224}} (with crop_pct)"
            )
        return resolved

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike) -> ImageProcessor:
        """The processor of a folder: its ``preprocessor_config.json``, else the
        ``pretrained_cfg`` of a timm ``config.json``."""
        path = Path(folder)
        if (path / PREPROCESSOR_NAME).is_file():
            return cls(json.loads((path / PREPROCESSOR_NAME).read_text()))
        timm_file = path / "config.json"
        config = json.loads(timm_file.read_text()) if timm_file.is_file() else {}
        if "pretrained_cfg" in config or "architecture" in config:  # timm's, or its legacy layout
            return _TimmImageProcessor(config.get("pretrained_cfg", config))
        raise FileNotFoundError(
            f"ImageProcessor.from_pretrained: {path} has no {PREPROCESSOR_NAME} and no timm "
            "config.json with pretrained_cfg. Fix: pass the model folder as downloaded from the "
            "hub (it carries preprocessor_config.json), or build ImageProcessor({...})"
        )

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """Write ``preprocessor_config.json`` (every key, as transformers writes it)."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.config, indent=2, sort_keys=True)
        (Path(folder) / PREPROCESSOR_NAME).write_text(text + "\n")

    def __call__(self, images: ImageInput, return_tensors: str = "np") -> dict[str, np.ndarray]:
        """``{"pixel_values": float32 [B, C, H, W]}`` of one image or a list of them."""
        if return_tensors != "np":
            raise ValueError(
                f"ImageProcessor: return_tensors={return_tensors!r} is not supported. Fix: "
                "return_tensors='np' (js models take NumPy arrays)"
            )
        batch = [self._process(self._array(image)) for image in self._listed(images)]
        if len({image.shape for image in batch}) > 1:
            raise ValueError(
                f"ImageProcessor: the images came out in different sizes "
                f"{sorted({image.shape for image in batch})}, which cannot share a batch. Fix: "
                "set crop_size (do_center_crop) or size {'height', 'width'}, or pass one image"
            )
        return {"pixel_values": np.stack(batch).transpose(0, 3, 1, 2)}

    @staticmethod
    def _listed(images: ImageInput) -> list[Any]:
        if isinstance(images, np.ndarray) and images.ndim == 4:
            return list(images)
        if isinstance(images, (list, tuple)):
            if not images:
                raise ValueError("ImageProcessor: no images given. Fix: pass at least one image")
            return list(images)
        return [images]

    def _array(self, image: Any) -> np.ndarray:
        """``image`` as a uint8 ``[H, W, C]`` array, RGB where the config says."""
        if isinstance(image, np.ndarray):
            return self._from_array(self._checked(image))
        if not isinstance(image, _pil().Image):
            raise TypeError(
                f"ImageProcessor: expected a PIL.Image.Image or a uint8 NumPy array, got "
                f"{type(image).__name__}. Fix: np.asarray(image, np.uint8) in [H, W, C] layout"
            )
        return self._from_pil(image)

    def _from_array(self, image: np.ndarray) -> np.ndarray:
        return self._rgb_array(image) if self.config.get("do_convert_rgb") else image

    def _from_pil(self, image: Any) -> np.ndarray:
        array = np.array(self._rgb(image) if self.config.get("do_convert_rgb") else image)
        return array[:, :, None] if array.ndim == 2 else array

    @staticmethod
    def _checked(array: np.ndarray) -> np.ndarray:
        if array.dtype != np.uint8:
            raise TypeError(
                f"ImageProcessor: image arrays must be uint8 (0-255), got {array.dtype}. Fix: "
                "(x * 255).round().astype(np.uint8) for floats in [0, 1]"
            )
        if array.ndim == 2:
            return array[:, :, None]
        if array.ndim != 3 or array.shape[2] not in (1, 3, 4):
            raise ValueError(
                f"ImageProcessor: an image array must be [H, W] or [H, W, C] with C 1, 3 or 4, "
                f"got shape {list(array.shape)}. Fix: np.moveaxis(image, 0, -1) for [C, H, W]"
            )
        return array

    @staticmethod
    def _rgb(image: Any) -> Any:
        """transformers' ``convert_to_rgb`` of a PIL image: transparency onto white."""
        Image = _pil()
        if "A" in image.getbands() or image.info.get("transparency") is not None:
            image = image.convert("RGBA")
            white = Image.new("RGBA", image.size, (255, 255, 255, 255))
            return Image.alpha_composite(white, image).convert("RGB")
        return image.convert("RGB")

    @staticmethod
    def _rgb_array(image: np.ndarray) -> np.ndarray:
        """transformers' ``convert_to_rgb`` of a uint8 array: gray repeated, alpha onto white."""
        if image.shape[2] == 1:
            return np.repeat(image, 3, axis=2)
        if image.shape[2] == 4:
            alpha = image[:, :, 3:] / 255
            return np.round(alpha * image[:, :, :3] + (1 - alpha) * 255).astype(np.uint8)
        return image

    def _process(self, image: np.ndarray) -> np.ndarray:
        """One ``[H, W, C]`` uint8 image to float32 ``[h, w, C]``."""
        config = self.config
        if config.get("do_resize"):
            image = self._resized(image)
        if config.get("do_center_crop"):
            image = self._center_crop(
                image, config["crop_size"]["height"], config["crop_size"]["width"]
            )
        values = self._scaled(image)
        if config.get("do_normalize"):
            values = self._normalized(values, config["image_mean"], config["image_std"])
        return values

    def _resized(self, image: np.ndarray) -> np.ndarray:
        size, height, width = self.config["size"], image.shape[0], image.shape[1]
        if "shortest_edge" not in size:
            return self._pil_resize(image, size["height"], size["width"])
        edge = size["shortest_edge"]
        if self.config["image_processor_type"] != "ConvNextImageProcessor":
            return self._pil_resize(image, *self._shorter_to(height, width, edge))
        if edge >= 384:  # ConvNeXt squashes from 384 up, below resizes to edge / crop_pct and crops
            return self._pil_resize(image, edge, edge)
        resized = self._shorter_to(height, width, int(edge / self.config["crop_pct"]))
        return self._center_crop(self._pil_resize(image, *resized), edge, edge)

    @staticmethod
    def _shorter_to(height: int, width: int, short: int) -> tuple[int, int]:
        """``(height, width)`` with the shorter side ``short``, the longer truncated (transformers'
        ``get_resize_output_image_size`` and torchvision's ``Resize(int)`` alike)."""
        if width <= height:
            return int(short * height / width), short
        return short, int(short * width / height)

    def _pil_resize(self, image: np.ndarray, height: int, width: int) -> np.ndarray:
        pil = _pil().fromarray(image[:, :, 0] if image.shape[2] == 1 else image)
        resized = np.array(pil.resize((width, height), resample=self.config["resample"]))
        return resized[:, :, None] if resized.ndim == 2 else resized

    def _center_crop(self, image: np.ndarray, height: int, width: int) -> np.ndarray:
        """transformers' ``center_crop``: the corner at ``(H - h) // 2``, which also centres a
        smaller image in zeros with the odd pixel before it."""
        top, left = (image.shape[0] - height) // 2, (image.shape[1] - width) // 2
        return _crop_or_pad(image, height, width, top, left, 0)

    def _scaled(self, image: np.ndarray) -> np.ndarray:
        """transformers' ``rescale``: multiplied in float64, then float32."""
        if not self.config.get("do_rescale"):
            return image.astype(np.float32)
        return (image.astype(np.float64) * self.config["rescale_factor"]).astype(np.float32)

    @staticmethod
    def _normalized(values: np.ndarray, mean: Any, std: Any) -> np.ndarray:
        """``(x - mean) / std`` in float32; a float mean or std serves every channel."""
        channels = values.shape[2]
        mean = [mean] * channels if isinstance(mean, (int, float)) else mean
        std = [std] * channels if isinstance(std, (int, float)) else std
        if len(mean) != channels or len(std) != channels:
            raise ValueError(
                f"ImageProcessor: the image has {channels} channels but image_mean has "
                f"{len(mean)} and image_std {len(std)}. Fix: pass RGB images "
                "(image.convert('RGB')), or set do_convert_rgb"
            )
        return (values - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)


def _torchvision_offset(size: int, crop: int) -> int:
    """Where torchvision's ``center_crop`` starts along a side: ``round((size - crop) / 2)``,
    or, for a side it pads first, ``-((crop - size) // 2)`` (the odd pixel after it)."""
    return -((crop - size) // 2) if crop > size else int(round((size - crop) / 2.0))


class _TimmImageProcessor(ImageProcessor):
    """timm's eval transform (``transforms_imagenet_eval``) of a ``pretrained_cfg``: the shorter
    side resized to ``floor(size / crop_pct)`` (``crop_mode`` ``center``; ``squash`` resizes
    both sides, ``border`` the longer one and pads with the mean), torchvision's ``CenterCrop``,
    ``ToTensor`` and ``Normalize``. Images are made RGB by ``convert("RGB")``, as timm's
    datasets do."""

    @staticmethod
    def _resolve(config: dict[str, Any]) -> dict[str, Any]:
        """timm's ``resolve_data_config``: its defaults where ``pretrained_cfg`` has no value."""
        given = {key: config[key] for key in _TIMM_DEFAULTS if config.get(key)}
        resolved = {**_TIMM_DEFAULTS, **given}
        if resolved["interpolation"] not in _TIMM_RESAMPLE or resolved["crop_mode"] not in (
            "center",
            "squash",
            "border",
        ):
            raise NotImplementedError(
                f"ImageProcessor: timm interpolation {resolved['interpolation']!r} / crop_mode "
                f"{resolved['crop_mode']!r} is not supported: interpolation one of "
                f"{sorted(_TIMM_RESAMPLE)}, crop_mode one of center, squash, border"
            )
        return {**resolved, "resample": _TIMM_RESAMPLE[resolved["interpolation"]]}

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """Set the ``pretrained_cfg`` keys of the folder's ``config.json`` (written if absent)."""
        path = Path(folder) / "config.json"
        config = json.loads(path.read_text()) if path.is_file() else {}
        config.setdefault("pretrained_cfg", {}).update(
            {key: self.config[key] for key in _TIMM_DEFAULTS}
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2) + "\n")

    def _from_array(self, image: np.ndarray) -> np.ndarray:
        return self._from_pil(_pil().fromarray(image[:, :, 0] if image.shape[2] == 1 else image))

    def _from_pil(self, image: Any) -> np.ndarray:
        return np.array(image.convert("RGB"))

    def _process(self, image: np.ndarray) -> np.ndarray:
        height, width = self.config["input_size"][1:]
        mode, crop_pct = self.config["crop_mode"], self.config["crop_pct"]
        scale = (math.floor(height / crop_pct), math.floor(width / crop_pct))
        if mode == "squash":
            image = self._pil_resize(image, *scale)
        elif mode == "center" and scale[0] == scale[1]:  # torchvision's Resize(int)
            image = self._pil_resize(
                image, *self._shorter_to(image.shape[0], image.shape[1], scale[0])
            )
        else:  # timm's ResizeKeepRatio: the shorter side fits (center), or the longer (border)
            ratios = (image.shape[0] / scale[0], image.shape[1] / scale[1])
            ratio = max(ratios) if mode == "border" else min(ratios)
            image = self._pil_resize(
                image, round(image.shape[0] / ratio), round(image.shape[1] / ratio)
            )
        fill = [round(255 * v) for v in self.config["mean"]] if mode == "border" else 0
        top = _torchvision_offset(image.shape[0], height)
        left = _torchvision_offset(image.shape[1], width)
        image = _crop_or_pad(image, height, width, top, left, fill)
        values = image.astype(np.float32) / np.float32(255)  # ToTensor divides in float32
        return self._normalized(values, self.config["mean"], self.config["std"])
