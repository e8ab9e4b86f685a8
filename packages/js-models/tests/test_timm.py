"""timm's ResNet and ConvNeXt both ways: folders timm's ``save_for_hf`` writes load into
js.models with timm's outputs, and folders js writes load in ``timm.create_model("local-dir:...")``.

Every model is random-initialised with its BatchNorm statistics, biases, norm weights and
layer-scale gammas perturbed, so a tensor dropped or misread cannot pass; outputs are compared
in float32, eval mode, to 1e-4 of the output scale (``max|js - timm| / max|timm|``).
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
from js import nn
from js.models.convnext import ConvNeXtConfig, ConvNeXtModel
from js.models.resnet import ResNetConfig, ResNetModel

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

# importlib mode does not put this folder on the path; the support module lives beside us.
sys.path.insert(0, str(Path(__file__).parent))
from family_support import randomize  # noqa: E402
from timm_support import timm_fixture  # noqa: E402, F401  (the `timm` fixture)

TOLERANCE = 1e-4


def _perturb_js(model: js.Module) -> None:
    """``_perturb`` for a js model: its 1-D state (BatchNorm statistics included)."""
    rng = np.random.default_rng(1)
    state = model.state_dict()
    for key, value in state.items():
        if value.ndim == 1:
            low = 0.5 if key.endswith("running_var") else -0.5
            state[key] = rng.uniform(low, 1.5, value.shape).astype(value.dtype)
    model.load_state_dict(state)


def _images(size: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)


def _js_forward(model: js.Module, images: np.ndarray) -> np.ndarray:
    return np.asarray(js.jit(lambda m, x: m(x))(model, jnp.asarray(images)))


def _timm_forward(model, images: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(images)).numpy()


def _relative(got: np.ndarray, expected: np.ndarray, figure: str) -> float:
    assert got.shape == expected.shape
    difference = float(np.abs(got - expected).max() / np.abs(expected).max())
    print(f"{figure}: max|js - timm| / max|timm| = {difference:.1e}")  # shown with -s
    return difference


def _load_js(folder: Path) -> js.Module:
    """The js model of a timm folder: ``js.models.from_pretrained`` (eval mode)."""
    return js.models.from_pretrained(folder)


def _save_js(model: js.models.PreTrainedModel, folder: Path) -> None:
    model.save_pretrained(folder)


def _from_timm(timm, tmp_path: Path, architecture: str, size: int, **kwargs):
    """timm's model (perturbed, eval), its save_for_hf folder, and the js model loaded from it."""
    from timm.models._hub import save_for_hf

    reference = timm.create_model(architecture, pretrained=False, **kwargs).eval()
    randomize(reference)
    folder = tmp_path / architecture
    save_for_hf(reference, folder, safe_serialization=True)
    model = _load_js(folder)
    assert not model.training
    return reference, model, folder


FROM_TIMM = [
    ("resnet18", 32, {"num_classes": 10}),
    ("convnext_atto", 32, {"num_classes": 10}),
    # Bottleneck blocks, and ConvNeXt's channels-last (Linear) path, kept small to stay fast
    ("resnet50", 32, {"num_classes": 10, "layers": (1, 1, 1, 1), "channels": (8, 16, 24, 32)}),
    ("convnext_tiny", 32, {"num_classes": 7, "depths": (1, 1, 2, 1), "dims": (8, 16, 24, 32)}),
    pytest.param("resnet50", 32, {"num_classes": 10}, marks=pytest.mark.slow),
    pytest.param("resnet34", 32, {"num_classes": 10}, marks=pytest.mark.slow),
    pytest.param("convnext_tiny", 64, {"num_classes": 10}, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("architecture", "size", "kwargs"), FROM_TIMM, ids=lambda v: str(v))
def test_timm_folder_loads_with_timm_logits(timm, tmp_path, architecture, size, kwargs):
    reference, model, folder = _from_timm(timm, tmp_path, architecture, size, **kwargs)
    assert isinstance(model, ConvNeXtModel if "convnext" in architecture else ResNetModel)
    assert model.config.architecture == architecture
    images = _images(size)
    expected = _timm_forward(reference, images)
    assert expected.shape == (2, kwargs["num_classes"])
    assert _relative(_js_forward(model, images), expected, architecture) < TOLERANCE


@pytest.mark.parametrize(
    ("architecture", "kwargs", "features"),
    [
        ("resnet18", {"layers": (1, 1, 1, 1)}, 512),
        ("convnext_atto", {"depths": (1, 1, 1, 1)}, 320),
    ],
)
def test_num_classes_zero_gives_pooled_features(timm, tmp_path, architecture, kwargs, features):
    reference, model, folder = _from_timm(timm, tmp_path, architecture, 32, num_classes=0, **kwargs)
    written = json.loads((folder / "config.json").read_text())
    assert written["num_classes"] == 0 and written["num_features"] == features
    assert isinstance(model.fc if architecture == "resnet18" else model.head.fc, nn.Identity)
    images = _images(32)
    expected = _timm_forward(reference, images)
    assert expected.shape == (2, features)
    figure = f"{architecture} features"
    assert _relative(_js_forward(model, images), expected, figure) < TOLERANCE


TINY_RESNET = {"layers": (1, 1, 1, 1), "channels": (8, 8, 8, 8)}


@pytest.mark.parametrize(
    ("architecture", "kwargs", "shape"),
    [
        ("resnet18", {"global_pool": "max", "in_chans": 1, **TINY_RESNET}, (2, 4)),
        ("resnet18", {"global_pool": "", "num_classes": 0, **TINY_RESNET}, (2, 8, 1, 1)),
        pytest.param(
            "resnet18", {"global_pool": "catavgmax", **TINY_RESNET}, (2, 4), marks=pytest.mark.slow
        ),
        pytest.param(
            "convnext_atto",
            {"global_pool": "avgmax", "depths": (1, 1, 1, 1)},
            (2, 4),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["resnet-max-1-channel", "resnet-no-pool", "resnet-catavgmax", "convnext-avgmax"],
)
def test_pooling_and_input_channels_follow_timm(timm, tmp_path, architecture, kwargs, shape):
    kwargs = {"num_classes": 4, **kwargs}
    reference, model, folder = _from_timm(timm, tmp_path, architecture, 32, **kwargs)
    images = _images(32)[:, : kwargs.get("in_chans", 3)]
    expected = _timm_forward(reference, images)
    assert expected.shape == shape
    figure = f"{architecture} pool {kwargs['global_pool']!r}"
    assert _relative(_js_forward(model, images), expected, figure) < TOLERANCE


@pytest.mark.parametrize(
    ("config", "size"),
    [
        (
            ResNetConfig(
                architecture="resnet18",
                num_classes=5,
                model_args={"layers": [1, 1, 2, 1], "channels": [16, 16, 32, 32]},
            ),
            32,
        ),
        (
            ConvNeXtConfig(
                architecture="convnext_atto", num_classes=5, model_args={"depths": [1, 1, 2, 1]}
            ),
            32,
        ),
    ],
    ids=["resnet18", "convnext_atto"],
)
def test_js_folder_loads_in_timm_with_js_logits(timm, tmp_path, config, size):
    family = ConvNeXtModel if isinstance(config, ConvNeXtConfig) else ResNetModel
    model = family(config, rngs=js.Rngs(params=3))
    _perturb_js(model)
    model.eval()
    folder = tmp_path / "js"
    _save_js(model, folder)
    reference = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    assert reference.num_classes == 5
    images = _images(size)
    expected = _timm_forward(reference, images)
    figure = f"{config.architecture} reverse"
    assert _relative(_js_forward(model, images), expected, figure) < TOLERANCE


def test_config_written_as_timm_writes_it(timm, tmp_path):
    from timm.models._hub import save_for_hf

    reference = timm.create_model("resnet34", pretrained=False, num_classes=3)
    save_for_hf(reference, tmp_path, safe_serialization=True)
    written = json.loads((tmp_path / "config.json").read_text())
    config = ResNetConfig.from_dict(written)
    assert config.to_dict() == written  # nothing lost, nothing added, same order
    assert list(config.to_dict()) == list(written)
    built = ResNetConfig(architecture="resnet34", num_classes=3).to_dict()
    assert {key: built[key] for key in ("num_classes", "num_features", "global_pool")} == {
        key: written[key] for key in ("num_classes", "num_features", "global_pool")
    }
    assert built["model_args"] == written["model_args"]
    assert ConvNeXtConfig(architecture="convnext_nano").to_dict()["num_features"] == 640


def test_unknown_architecture_and_model_args_are_named():
    with pytest.raises(ValueError, match=r"unknown timm architecture 'seresnet50'.*'resnet18'"):
        ResNetConfig(architecture="seresnet50")
    # the message lists what js builds from: the keys every timm family takes and ResNet's own
    known = (
        r"\['avg_down', 'base_width', 'cardinality', 'channels', 'global_pool', 'in_chans', "
        r"'layers', 'num_classes', 'stem_type', 'stem_width'\]"
    )
    with pytest.raises(NotImplementedError, match=r"\['output_stride'\] of 'resnet50'.*" + known):
        ResNetConfig(architecture="resnet50", model_args={"output_stride": 16})
    with pytest.raises(ValueError, match="global_pool 'gem' is not one of"):
        ResNetConfig(architecture="resnet18", global_pool="gem")
    with pytest.raises(ValueError, match="'catavgmax' doubles the pooled width"):
        ConvNeXtConfig(architecture="convnext_atto", global_pool="catavgmax")
    with pytest.raises(ValueError, match=r"BasicBlock supports cardinality=1"):
        ResNetModel(
            ResNetConfig(architecture="resnet18", model_args={"cardinality": 2}),
            rngs=js.Rngs(params=0),
        )


def test_legacy_single_dict_config_reads():
    config = ResNetConfig.from_dict({"architecture": "resnet18", "num_classes": 4, "mean": [0.5]})
    assert config.num_classes == 4 and config.pretrained_cfg["mean"] == [0.5]
    assert config.to_dict()["model_args"]["num_classes"] == 4


def test_family_modules_and_the_timm_skeleton():
    """The modules' ``ARCHITECTURES`` (timm name -> model) and ``DEFAULT_ARCHITECTURE`` that
    ``js.models.from_pretrained`` reads; a family missing a part of the skeleton names it."""
    from js.models import convnext, resnet
    from js.models._timm import TimmModel

    assert resnet.ARCHITECTURES["resnext50_32x4d"] is ResNetModel
    assert set(convnext.ARCHITECTURES) == set(ConvNeXtConfig.architectures)
    assert resnet.DEFAULT_ARCHITECTURE == "resnet50"
    assert convnext.DEFAULT_ARCHITECTURE == "convnext_tiny"

    class Unbuilt(TimmModel):
        config_class = ResNetConfig

    with pytest.raises(NotImplementedError, match="Unbuilt does not define _build"):
        Unbuilt(ResNetConfig(architecture="resnet18"), rngs=js.Rngs(params=0))
