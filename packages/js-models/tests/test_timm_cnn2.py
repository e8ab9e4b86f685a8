"""timm's deep-stem ResNets (``resnet*d``, ``stem_type`` / ``avg_down``), ConvNeXt V2 and RegNet
X / Y both ways: a folder timm's ``save_for_hf`` writes loads into js.models with timm's logits
and feature maps, and the folder js writes from it loads in ``timm.create_model("local-dir:...")``
with the same logits.

Each model is tiny (shrunk through timm's own constructor arguments), random, with every 1-D
parameter and the BatchNorm statistics perturbed; float32, eval mode, 32x32 images, compared to
1e-4 of the output scale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.models
from js.models.convnext import ConvNeXtModel
from js.models.resnet import ResNetConfig, ResNetModel
from js.models.timm_regnet import RegNetConfig, RegNetModel, stage_plan

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

# importlib mode does not put this folder on the path; the support modules live beside us.
sys.path.insert(0, str(Path(__file__).parent))
from family_support import perturb, randomize, relative_error  # noqa: E402
from timm_support import timm_fixture  # noqa: E402, F401  (the `timm` fixture)

TOLERANCE = 1e-4
TINY_RESNET = {"layers": (1, 1, 1, 1), "channels": (8, 8, 16, 16), "stem_width": 8}
# four stages of widths 16, 24, 32, 56 (the last two blocks deep), groups of 8 channels
TINY_REGNET = {"w0": 16, "wa": 12, "wm": 1.5, "depth": 5, "group_size": 8, "stem_width": 16}

CASES = {
    "resnet18d": ("resnet18d", ResNetModel, TINY_RESNET),
    "resnet26d": ("resnet26d", ResNetModel, TINY_RESNET),
    # the equivalent constructor arguments on a plain architecture, with the tiered stem
    "resnet50-tiered": (
        "resnet50",
        ResNetModel,
        {**TINY_RESNET, "stem_type": "deep_tiered", "avg_down": True},
    ),
    "convnextv2_atto": ("convnextv2_atto", ConvNeXtModel, {"depths": (1, 1, 1, 1)}),
    # the channels-last (Linear) MLP, whose GRN normalises [B, H, W, C]
    "convnextv2_tiny": (
        "convnextv2_tiny",
        ConvNeXtModel,
        {"depths": (1, 1, 2, 1), "dims": (8, 16, 24, 32)},
    ),
    # with ResNet-D's pooled shortcut (downsample.0 the pool, downsample.1 the conv and BN)
    "regnetx_002": ("regnetx_002", RegNetModel, {**TINY_REGNET, "downsample": "avg"}),
    "regnety_002": ("regnety_002", RegNetModel, TINY_REGNET),
}


def _timm_outputs(model, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        features = model.forward_features(torch.from_numpy(images))
        return model.forward_head(features).numpy(), features.numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_timm_folder_loads_and_js_folder_loads_in_timm(timm, tmp_path, case):
    from timm.models._hub import save_for_hf

    architecture, family, kwargs = CASES[case]
    reference = timm.create_model(architecture, num_classes=5, **kwargs).eval()
    perturb(reference)
    randomize(reference, 1, parameters=False)
    save_for_hf(reference, tmp_path / "timm", safe_serialization=True)
    images = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    logits, features = _timm_outputs(reference, images)

    model = js.models.from_pretrained(tmp_path / "timm")
    assert isinstance(model, family) and model.config.architecture == architecture
    got = js.jit(lambda m, x: (m(x), m.forward_features(x)))(model, jnp.asarray(images))
    model.save_pretrained(tmp_path / "js")
    back = timm.create_model(f"local-dir:{tmp_path / 'js'}", pretrained=True).eval()
    errors = [relative_error(got[0], logits), relative_error(got[1], features)]
    errors.append(relative_error(_timm_outputs(back, images)[0], logits))
    print(f"{case}: js/timm logits, features, timm reading js: {errors}")  # shown with -s
    assert max(errors) < TOLERANCE


def test_js_made_regnet_loads_in_timm(timm, tmp_path):
    """A RegNet made in js writes the ``config.json`` timm builds it from (``model_args``)."""
    config = RegNetConfig(architecture="regnety_002", num_classes=3, model_args=TINY_REGNET)
    model = RegNetModel(config, rngs=js.Rngs(params=0)).eval()
    model.save_pretrained(tmp_path)
    back = timm.create_model(f"local-dir:{tmp_path}", pretrained=True).eval()
    assert back.pretrained_cfg["first_conv"] == "stem.conv"
    images = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    got = js.jit(lambda m, x: m(x))(model, jnp.asarray(images))
    assert relative_error(got, _timm_outputs(back, images)[0]) < TOLERANCE
    deep = ResNetConfig(architecture="resnet50d").to_dict()["pretrained_cfg"]["first_conv"]
    assert deep == "conv1.0"  # timm's name of a deep stem's first conv


def test_regnet_stage_plans_are_timms(timm):
    """Every registered RegNet's four stages (widths, depths, group sizes), as timm derives them."""
    from timm.models.regnet import RegNet, model_cfgs

    for name in RegNetConfig.architectures:
        stages, _ = RegNet._get_stage_args(None, model_cfgs[name])
        expected = [(s["out_chs"], s["depth"], s["group_size"]) for s in stages]
        plan = stage_plan(RegNetConfig(architecture=name))
        assert [(s.out_chs, s.depth, s.group_size) for s in plan] == expected, name


def test_bad_stems_and_regnet_cfgs_are_named():
    with pytest.raises(ValueError, match=r"stem_type 'tiered' is not one of"):
        ResNetModel(
            ResNetConfig(architecture="resnet18", model_args={"stem_type": "tiered"}),
            rngs=js.Rngs(params=0),
        )
    with pytest.raises(ValueError, match=r"gives 3 stage widths \[8, 16, 48\]; .* needs 4"):
        RegNetConfig(architecture="regnetx_002", model_args={"w0": 8, "wa": 8, "depth": 4})
    with pytest.raises(ValueError, match=r"downsample None is not supported"):
        RegNetConfig(architecture="regnety_002", model_args={"downsample": None})
