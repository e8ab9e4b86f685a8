"""js.models.ImageProcessor against transformers' slow (Pillow) image processors and against
timm's eval transform, on generated images of odd sizes and modes.

transformers writes each folder's preprocessor_config.json (save_pretrained) and runs the same
images; timm's transform needs torchvision, which cannot be imported here, so its reference is
written below from torchvision's documented semantics (Resize(int) of the shorter side, CenterCrop
with its rounding, ToTensor, Normalize), with Pillow and NumPy.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
from PIL import Image

from js.models import ImageProcessor
from js.models.image_processor import _TimmImageProcessor

RNG = np.random.default_rng(0)
RGB_PIL = Image.fromarray(RNG.integers(0, 256, (37, 53, 3), dtype=np.uint8))
RGB_ARRAY = RNG.integers(0, 256, (200, 300, 3), dtype=np.uint8)
RGBA_PIL = Image.fromarray(RNG.integers(0, 256, (45, 31, 4), dtype=np.uint8), "RGBA")
GRAY_PIL = Image.fromarray(RNG.integers(0, 256, (29, 41), dtype=np.uint8), "L")
RGBA_ARRAY = RNG.integers(0, 256, (23, 37, 4), dtype=np.uint8)
RGB_IMAGES = [RGB_PIL, RGB_ARRAY]
ANY_IMAGES = [*RGB_IMAGES, RGBA_PIL, GRAY_PIL, RGBA_ARRAY]

# (transformers' slow class, its arguments, the images it takes: without do_convert_rgb ViT and
# ConvNeXt keep an RGBA or gray image's channels, which their 3-channel mean refuses)
CASES = {
    "vit": ("ViTImageProcessorPil", {"size": {"height": 24, "width": 40}}, RGB_IMAGES),
    "clip": (
        "CLIPImageProcessorPil",
        {"size": {"shortest_edge": 30}, "crop_size": {"height": 27, "width": 21}},
        ANY_IMAGES,
    ),
    "siglip": ("SiglipImageProcessorPil", {"size": {"height": 28, "width": 28}}, ANY_IMAGES),
    "bit_padded": (  # a crop larger than the resized image: transformers pads with zeros
        "BitImageProcessorPil",
        {"size": {"shortest_edge": 20}, "crop_size": {"height": 23, "width": 26}, "resample": 2},
        ANY_IMAGES,
    ),
    "convnext_crop_pct": (
        "ConvNextImageProcessorPil",
        {"size": {"shortest_edge": 32}, "crop_pct": 0.9},
        RGB_IMAGES,
    ),
    "convnext_384": ("ConvNextImageProcessorPil", {"size": {"shortest_edge": 384}}, RGB_IMAGES),
}


@pytest.fixture(scope="module")
def slow_processors():
    """transformers' Pillow image processor classes by name (imported with torchvision hidden)."""
    from llama_support import transformers_without_torchvision

    with transformers_without_torchvision() as transformers:
        return {name: getattr(transformers, name) for name, _, _ in CASES.values()}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_transformers_slow_processor(case, slow_processors, tmp_path):
    name, kwargs, images = CASES[case]
    reference = slow_processors[name](**kwargs)
    reference.save_pretrained(tmp_path)
    processor = ImageProcessor.from_pretrained(tmp_path)

    got = processor(images)["pixel_values"]
    expected = np.concatenate(
        [reference(image, return_tensors="np")["pixel_values"] for image in images]
    )
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_save_pretrained_is_read_back_by_transformers(slow_processors, tmp_path):
    config = {
        "image_processor_type": "CLIPImageProcessor",
        "size": 26,  # an int: CLIP's shortest edge
        "crop_size": 24,
        "image_mean": 0.5,
        "resample": 1,
    }
    processor = ImageProcessor(config)
    processor.save_pretrained(tmp_path)
    reference = slow_processors["CLIPImageProcessorPil"].from_pretrained(tmp_path)
    expected = reference(RGBA_PIL, return_tensors="np")["pixel_values"]
    np.testing.assert_array_equal(processor(RGBA_PIL)["pixel_values"], expected)
    assert ImageProcessor.from_pretrained(tmp_path).config == processor.config


def torchvision_eval(image: Image.Image, size: int, crop_pct: float, resample: int, mean, std):
    """timm's transforms_imagenet_eval (crop_mode center) as torchvision documents its steps."""
    scale = math.floor(size / crop_pct)
    width, height = image.size  # Resize(scale): the shorter side to scale, the longer truncated
    if width <= height:
        width, height = scale, int(scale * height / width)
    else:
        width, height = int(scale * width / height), scale
    image = image.convert("RGB").resize((width, height), resample=resample)
    top, left = int(round((height - size) / 2.0)), int(round((width - size) / 2.0))
    image = image.crop((left, top, left + size, top + size))  # CenterCrop(size)
    tensor = np.asarray(image).astype(np.float32) / np.float32(255)  # ToTensor
    normalized = (tensor - np.float32(mean)) / np.float32(std)  # Normalize(mean, std)
    return normalized.transpose(2, 0, 1)


def test_timm_eval_transform(tmp_path):
    # floor(32 / 0.9) = 35: the crop starts at round(1.5) = 2 (transformers' floor would be 1)
    # and round(7.5) = 8 in the tall images
    cfg = {"input_size": [3, 32, 32], "interpolation": "bilinear", "crop_pct": 0.9}
    cfg |= {"mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3], "num_classes": 10}
    (tmp_path / "config.json").write_text(
        json.dumps({"architecture": "resnet18", "pretrained_cfg": cfg})
    )
    processor = ImageProcessor.from_pretrained(tmp_path)
    images = [RGB_PIL, Image.fromarray(RGB_ARRAY[:50, :37]), RGBA_PIL]
    expected = [torchvision_eval(image, 32, 0.9, 2, cfg["mean"], cfg["std"]) for image in images]
    got = processor([RGB_PIL, RGB_ARRAY[:50, :37], RGBA_PIL])["pixel_values"]
    np.testing.assert_array_equal(got, np.stack(expected))

    processor.save_pretrained(tmp_path)  # into the model's config.json, its other keys kept
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architecture"] == "resnet18" and saved["pretrained_cfg"]["num_classes"] == 10
    reread = ImageProcessor.from_pretrained(tmp_path)(RGB_PIL)["pixel_values"]
    np.testing.assert_array_equal(reread, got[:1])


def test_timm_defaults_and_crop_modes(tmp_path):
    """resolve_data_config's defaults (bicubic, 0.875, ImageNet mean/std); squash resizes both
    sides, border fits the longer side and pads with the mean, a non-square size keeps the ratio."""
    legacy = {"architecture": "resnet18", "input_size": [3, 16, 16]}  # no pretrained_cfg
    (tmp_path / "config.json").write_text(json.dumps(legacy))
    resolved = ImageProcessor.from_pretrained(tmp_path).config
    assert resolved["input_size"] == [3, 16, 16]
    assert (resolved["interpolation"], resolved["crop_pct"]) == ("bicubic", 0.875)
    assert resolved["mean"] == [0.485, 0.456, 0.406]
    squash = _timm({"input_size": [3, 16, 24], "crop_mode": "squash"})(RGB_PIL)
    assert squash["pixel_values"].shape == (1, 3, 16, 24)
    keep_ratio = _timm({"input_size": [3, 20, 30], "crop_pct": 1.0})(RGB_PIL)
    assert keep_ratio["pixel_values"].shape == (1, 3, 20, 30)

    cfg = {"input_size": [3, 20, 30], "crop_mode": "border", "crop_pct": 1.0, "mean": [1, 0, 0]}
    white = np.full((10, 60, 3), 255, np.uint8)  # -> 5 x 30, padded with round(255 * mean)
    green = _timm(cfg)(white)["pixel_values"][0, 1]
    np.testing.assert_array_equal(green[7:12], np.float32(1) / np.float32(0.224))
    assert not green[:7].any() and not green[12:].any()


def _timm(pretrained_cfg):
    return _TimmImageProcessor(pretrained_cfg)


VIT = {"image_processor_type": "ViTImageProcessor", "size": {"height": 8, "width": 8}}
UNCROPPED = {"image_processor_type": "CLIPImageProcessor", "do_center_crop": False, "size": 8}
ERRORS = {
    "no_pillow": (VIT, RGB_ARRAY, ImportError, r'pip install "js-models\[vision\]"'),
    "size": ({**VIT, "size": {"longest_edge": 8}}, None, NotImplementedError, "size .* not supp"),
    "type": ({"image_processor_type": "DetrImageProcessor"}, None, NotImplementedError, "Detr"),
    "convnext_size": (
        {"image_processor_type": "ConvNextImageProcessor", "size": [8, 8]},
        None,
        ValueError,
        "needs size {'shortest_edge': n}",
    ),
    "crop_size": ({**VIT, "do_center_crop": True}, None, ValueError, "crop_size is not"),
    "empty": (VIT, [], ValueError, "no images given"),
    "not_an_image": (VIT, "cat.png", TypeError, "expected a PIL.Image.Image or a uint8"),
    "float_array": (VIT, RGB_ARRAY / 255, TypeError, "must be uint8 .*, got float64"),
    "channels_first": (VIT, RGB_ARRAY.transpose(2, 0, 1), ValueError, r"got shape \[3, 200, 300\]"),
    "gray_without_rgb": (VIT, GRAY_PIL, ValueError, "1 channels but image_mean has 3"),
    "sizes_differ": (UNCROPPED, [RGB_PIL, RGB_ARRAY], ValueError, "different sizes"),
    "return_tensors": (VIT, RGB_PIL, ValueError, "return_tensors='pt' is not supported"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors(case, monkeypatch):
    config, images, error, message = ERRORS[case]
    if case == "no_pillow":
        monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(error, match=message):
        processor = ImageProcessor(config)
        processor(images, return_tensors="pt" if case == "return_tensors" else "np")


def test_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no preprocessor_config.json and no timm"):
        ImageProcessor.from_pretrained(tmp_path)
    with pytest.raises(NotImplementedError, match="timm interpolation 'cubic'"):
        _timm({"interpolation": "cubic"})
