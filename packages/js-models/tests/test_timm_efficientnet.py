"""timm's EfficientNet and MobileNetV3 both ways: a folder timm's ``save_for_hf`` writes loads into
js.models with timm's logits and feature maps, and the folder js writes from it loads in
``timm.create_model("local-dir:...")`` with the same logits.

Random models with every 1-D parameter and the BatchNorm statistics perturbed; float32, eval
mode, 32x32 images, compared to 1e-4 of the output scale. timm's EfficientNet constructors take
no size arguments (efficientnet_b0 is the smallest); the MobileNetV3 ones take
``depth_multiplier``, which the cases use to stay small. Each case compiles one program.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.models
from js.models._efficientnet_blocks import _scale_depth
from js.models.timm_efficientnet import (
    EFFICIENTNET_DEF,
    MOBILENETV3_LARGE_DEF,
    MOBILENETV3_SMALL_DEF,
    EfficientNetConfig,
    EfficientNetModel,
    MobileNetV3Config,
    MobileNetV3Model,
    decode_block,
)

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

# importlib mode does not put this folder on the path; the support modules live beside us.
sys.path.insert(0, str(Path(__file__).parent))
from family_support import perturb, randomize, relative_error  # noqa: E402
from timm_support import timm_fixture  # noqa: E402, F401  (the `timm` fixture)

TOLERANCE = 1e-4

CASES = {
    # DepthwiseSeparable (SE, no skip), InvertedResidual with swish and sigmoid-gated SE
    "efficientnet_b0": ("efficientnet_b0", EfficientNetModel, {}),
    # stride-2 DepthwiseSeparable, ReLU blocks without SE, hard-swish, ConvBnAct, the MNv3 head
    "mobilenetv3_small_100": (
        "mobilenetv3_small_100",
        MobileNetV3Model,
        {"depth_multiplier": 0.25},
    ),
    # no classifier (the hard-swish conv_head features), max pooling, a stride-1 DS block's skip,
    # 2.3x / 2.5x expansions, channels scaled by 0.75
    "mobilenetv3_large_075-features": (
        "mobilenetv3_large_075",
        MobileNetV3Model,
        {"depth_multiplier": 0.25, "num_classes": 0, "global_pool": "max"},
    ),
}
SLOW_CASES = {
    "mobilenetv3_large_100": ("mobilenetv3_large_100", MobileNetV3Model, {}),
    "efficientnet_b1-features": (
        "efficientnet_b1",
        EfficientNetModel,
        {"num_classes": 0, "global_pool": "avgmax"},
    ),
    "mobilenetv3_large_075-catavgmax": (
        "mobilenetv3_large_075",
        MobileNetV3Model,
        {"global_pool": "catavgmax"},
    ),
}


def _images() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)


def _timm_outputs(model, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        features = model.forward_features(torch.from_numpy(images))
        return model.forward_head(features).numpy(), features.numpy()


def _js_outputs(model: js.Module, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    def outputs(model, images):
        features = model.forward_features(images)
        return model.forward_head(features), features

    logits, features = js.jit(outputs)(model, jnp.asarray(images))
    return np.asarray(logits), np.asarray(features)


@pytest.mark.parametrize(
    "case",
    [*CASES, *(pytest.param(name, marks=pytest.mark.slow) for name in SLOW_CASES)],
)
def test_timm_folder_loads_and_js_folder_loads_in_timm(timm, tmp_path, case):
    from timm.models._hub import save_for_hf

    architecture, family, kwargs = {**CASES, **SLOW_CASES}[case]
    reference = timm.create_model(architecture, **{"num_classes": 5, **kwargs}).eval()
    perturb(reference)
    randomize(reference, 1, parameters=False)
    save_for_hf(reference, tmp_path / "timm", safe_serialization=True)
    images = _images()
    logits, features = _timm_outputs(reference, images)

    model = js.models.from_pretrained(tmp_path / "timm")
    assert isinstance(model, family) and model.config.architecture == architecture
    assert model.num_features == reference.num_features
    got = _js_outputs(model, images)
    model.save_pretrained(tmp_path / "js")
    back = timm.create_model(f"local-dir:{tmp_path / 'js'}", pretrained=True).eval()
    errors = [relative_error(got[0], logits), relative_error(got[1], features)]
    errors.append(relative_error(_timm_outputs(back, images)[0], logits))
    print(f"{case}: js/timm logits, features, timm reading js: {errors}")  # shown with -s
    assert max(errors) < TOLERANCE


@pytest.mark.parametrize(
    ("architecture", "model_args"),
    [
        ("efficientnet_b2", {}),  # width 1.1: rounded channels, depth 1.2: repeats rounded up
        ("mobilenetv3_large_075", {"depth_multiplier": 0.5}),
        pytest.param("efficientnet_b3", {}, marks=pytest.mark.slow),
        pytest.param("mobilenetv3_small_075", {}, marks=pytest.mark.slow),
    ],
)
def test_state_dict_and_config_are_timms(timm, tmp_path, architecture, model_args):
    """Every tensor name and shape of a scaled architecture, and its ``config.json``, as timm's."""
    from timm.models._hub import save_config_for_hf

    reference = timm.create_model(architecture, num_classes=7, **model_args)
    expected = {name: tuple(value.shape) for name, value in reference.state_dict().items()}
    expected = {k: v for k, v in expected.items() if not k.endswith("num_batches_tracked")}
    family = EfficientNetModel if architecture.startswith("efficientnet") else MobileNetV3Model
    config = family.config_class(architecture=architecture, num_classes=7, model_args=model_args)
    model = family(config, rngs=js.Rngs(params=0))
    assert {name: tuple(value.shape) for name, value in model.state_dict().items()} == expected
    save_config_for_hf(reference, tmp_path / "config.json")
    written, ours = json.loads((tmp_path / "config.json").read_text()), config.to_dict()
    head = ("architecture", "num_classes", "num_features", "global_pool", "model_args")
    assert {key: ours[key] for key in head} == {key: written[key] for key in head}
    preprocessing = ("mean", "std", "first_conv", "classifier")  # sizes vary by weights
    assert {key: ours["pretrained_cfg"][key] for key in preprocessing} == {
        key: written["pretrained_cfg"][key] for key in preprocessing
    }


def test_js_made_model_loads_in_timm(timm, tmp_path):
    """A model made in js (timm's initial weights, 1-D state perturbed) saves a folder timm
    builds and loads with js's logits."""
    config = MobileNetV3Config(
        architecture="mobilenetv3_small_050", num_classes=3, model_args={"depth_multiplier": 0.25}
    )
    model = MobileNetV3Model(config, rngs=js.Rngs(params=0))
    rng = np.random.default_rng(1)
    state = model.state_dict()
    for key, value in state.items():
        if value.ndim == 1:
            low = 0.5 if key.endswith("running_var") else -0.5
            state[key] = rng.uniform(low, 1.5, value.shape).astype(value.dtype)
    model.load_state_dict(state)
    model.eval().save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["num_features"] == 288 and written["pretrained_cfg"]["first_conv"] == "conv_stem"
    reference = timm.create_model(f"local-dir:{tmp_path}", pretrained=True).eval()
    images = _images()
    expected, _ = _timm_outputs(reference, images)
    assert relative_error(_js_outputs(model, images)[0], expected) < TOLERANCE


def test_arch_defs_decode_and_scale_as_timms(timm):
    """Each family's block strings at several depth multipliers, as timm's ``decode_arch_def``."""
    from timm.models._efficientnet_builder import decode_arch_def

    def fields(spec):
        return spec.block_type, spec.kernel_size, spec.stride, spec.out_chs, spec.se_ratio

    def timm_fields(args):
        kernel = args.get("dw_kernel_size", args.get("kernel_size"))
        return args["block_type"], kernel, args["stride"], args["out_chs"], args.get("se_ratio", 0)

    for arch_def in (EFFICIENTNET_DEF, MOBILENETV3_LARGE_DEF, MOBILENETV3_SMALL_DEF):
        for depth in (0.25, 1.1, 3.1):
            expected = decode_arch_def([list(row) for row in arch_def], depth)
            got = [_scale_depth([decode_block(text) for text in row], depth) for row in arch_def]
            assert [[fields(spec) for spec in stage] for stage in got] == [
                [timm_fields(args) for args in stage] for stage in expected
            ]


def test_unsupported_variants_are_named():
    with pytest.raises(NotImplementedError, match=r"'tf_efficientnet_b0' is a TensorFlow port"):
        EfficientNetConfig(architecture="tf_efficientnet_b0")
    with pytest.raises(NotImplementedError, match=r"\['depth_multiplier'\] of 'efficientnet_b0'"):
        EfficientNetConfig(architecture="efficientnet_b0", model_args={"depth_multiplier": 0.5})
    with pytest.raises(ValueError, match="unknown timm architecture 'mobilenetv3_rw'"):
        MobileNetV3Config(architecture="mobilenetv3_rw")
    with pytest.raises(NotImplementedError, match=r"'er_r1_k3_s2_e4_c24' needs timm features"):
        decode_block("er_r1_k3_s2_e4_c24")
    with pytest.raises(NotImplementedError, match=r"mixed kernels"):
        decode_block("ir_r1_k3.5_s2_e6_c40")
