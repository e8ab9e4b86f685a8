"""from_pretrained and save_pretrained: folder layouts (sharded, hub-style), prefixes, strictness,
initial values of what a file lacks, and every error (raised before anything is loaded)."""

from __future__ import annotations

import json
import logging
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
from gpt2_support import IDS, MASK, TINY, reference, rel, save_reference, torch_outputs

import js
import js.models
from js.models import GPT2Config, GPT2Model, PretrainedConfig, PreTrainedModel

pytest.importorskip("torch")
pytestmark = pytest.mark.torch
TOL = 1e-4


@pytest.fixture(scope="module")
def ref():
    return reference(seed=1)


@pytest.fixture(scope="module")
def folder(ref, tmp_path_factory):
    return save_reference(ref, tmp_path_factory.mktemp("gpt2"))


def _copy(folder, tmp_path):
    return shutil.copytree(folder, tmp_path / "copy")


def _rewrite(folder, change):
    """Rewrite ``folder``'s model.safetensors as ``change(tensors)`` returns it."""
    path = folder / "model.safetensors"
    tensors = dict(safetensors.numpy.load_file(str(path)))
    safetensors.numpy.save_file(change(tensors), str(path), metadata={"format": "pt"})


def test_sharded_index_folder(ref, tmp_path):
    folder = save_reference(ref, tmp_path / "sharded", max_shard_size="50KB")
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("model-*.safetensors"))) > 2
    model = js.models.from_pretrained(folder)
    logits, _ = torch_outputs(ref)
    assert rel(model(input_ids=IDS, attention_mask=MASK), logits) < TOL


def test_hub_style_folder_with_mask_buffers(ref, folder, tmp_path):
    """The hub's gpt2 files: names without 'transformer.', plus attn.bias/attn.masked_bias."""
    copy = _copy(folder, tmp_path)

    def hub(tensors):
        out = {k.removeprefix("transformer."): v for k, v in tensors.items()}
        for i in range(TINY["n_layer"]):
            out[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 16, 16), np.uint8))
            out[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
        return out

    _rewrite(copy, hub)
    logits, hidden = torch_outputs(ref)
    head = js.models.from_pretrained(copy)  # a base-model file into the head model
    assert rel(head(input_ids=IDS, attention_mask=MASK), logits) < TOL
    info = js.models.loading_info(head)
    assert info.missing_keys == [] and info.unexpected_keys == []
    assert "h.0.attn.bias" in info.ignored_keys and "h.1.attn.masked_bias" in info.ignored_keys
    base = GPT2Model.from_pretrained(copy)
    assert rel(base(input_ids=IDS, attention_mask=MASK), hidden) < TOL


def test_base_model_ignores_the_head_and_reports_it(tmp_path, caplog):
    ref = reference(seed=2, tie_word_embeddings=False)
    folder = save_reference(ref, tmp_path / "untied")
    with caplog.at_level(logging.INFO, logger="js.models"):
        base = GPT2Model.from_pretrained(folder)
    assert js.models.loading_info(base).ignored_keys == ["lm_head.weight"]
    assert "lm_head.weight" in caplog.text
    _, hidden = torch_outputs(ref)
    assert rel(base(input_ids=IDS, attention_mask=MASK), hidden) < TOL


def test_strict_false_reports_and_keeps_initial_values(folder, tmp_path, caplog):
    copy = _copy(folder, tmp_path)
    dropped = ["transformer.h.1.ln_2.weight", "transformer.h.0.attn.c_attn.weight"]

    def change(tensors):
        for key in dropped:
            del tensors[key]
        tensors["transformer.h.0.extra"] = np.zeros(3, np.float32)
        return tensors

    _rewrite(copy, change)
    with pytest.raises(ValueError, match="nothing was loaded") as error:
        js.models.from_pretrained(copy)
    assert all(key in str(error.value) for key in [*dropped, "transformer.h.0.extra"])
    with caplog.at_level(logging.WARNING, logger="js.models"):
        model = js.models.from_pretrained(copy, strict=False, dtype=jnp.bfloat16)
    info = js.models.loading_info(model)
    assert sorted(info.missing_keys) == sorted(dropped)
    assert info.unexpected_keys == ["transformer.h.0.extra"]
    assert "strict=False" in caplog.text
    # the missing ones hold the constructor's initial values: its constants exactly, its random
    # draws from the same distribution (drawn in a compiled program, so not the eager values)
    ln_2 = model.transformer.h[1].ln_2.weight.value
    assert ln_2.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(ln_2, np.float32), 1.0)
    drawn = np.asarray(model.transformer.h[0].attn.c_attn.weight.value, np.float32)
    assert drawn.shape == (32, 96) and abs(drawn.std() - 0.02) < 0.002 and abs(drawn.mean()) < 0.002
    logits = np.asarray(model(input_ids=IDS, attention_mask=MASK), np.float32)
    assert np.isfinite(logits).all()


def test_save_pretrained_round_trip_and_layout(folder, tmp_path):
    model = js.models.from_pretrained(folder)
    model.save_pretrained(tmp_path / "out")
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["config.json", "model.safetensors"]
    back = js.models.from_pretrained(tmp_path / "out")
    np.testing.assert_array_equal(np.asarray(back(input_ids=IDS)), np.asarray(model(input_ids=IDS)))
    bf16 = js.models.from_pretrained(folder, dtype=jnp.bfloat16)
    bf16.save_pretrained(tmp_path / "bf16")
    auto = js.models.from_pretrained(tmp_path / "bf16", dtype="auto")
    assert auto.transformer.wte.weight.value.dtype == jnp.bfloat16
    assert js.models.from_pretrained(tmp_path / "bf16").lm_head.weight.value.dtype == jnp.float32


# -- errors ------------------------------------------------------------------------------------


def test_missing_path_and_file_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        js.models.from_pretrained(tmp_path / "nowhere")
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError, match="load_weights"):
        js.models.from_pretrained(tmp_path / "f")
    with pytest.raises(TypeError, match="folder path"):
        js.models.from_pretrained(3)  # type: ignore[arg-type]


def test_no_config_and_bad_configs(folder, tmp_path):
    copy = _copy(folder, tmp_path)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        js.models.from_pretrained(copy)
    (copy / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        js.models.from_pretrained(copy)
    (copy / "config.json").write_text(json.dumps({**config, "model_type": "mamba"}))
    with pytest.raises(ValueError, match=r"'mamba'.*Supported.*'gpt2'"):
        js.models.from_pretrained(copy)
    (copy / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2ForQA"]}))
    with pytest.raises(ValueError, match=r"'GPT2ForQA'.*'GPT2LMHeadModel', 'GPT2Model'"):
        js.models.from_pretrained(copy)
    # ... which its base class still loads
    assert isinstance(GPT2Model.from_pretrained(copy), GPT2Model)
    (copy / "config.json").write_text(json.dumps({"architecture": "nfnet_l0"}))
    with pytest.raises(ValueError, match="timm architecture 'nfnet_l0'"):
        js.models.from_pretrained(copy)
    (copy / "config.json").write_text(json.dumps({"hidden_size": 3}))
    with pytest.raises(ValueError, match="neither 'model_type'"):
        js.models.from_pretrained(copy)


def test_no_weight_file(folder, tmp_path):
    copy = _copy(folder, tmp_path)
    (copy / "model.safetensors").rename(copy / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match=r"no model.safetensors.*pytorch_model.bin"):
        js.models.from_pretrained(copy)


def test_mis_shaped_tensor_is_an_error_even_when_not_strict(folder, tmp_path):
    copy = _copy(folder, tmp_path)

    def change(tensors):
        tensors["transformer.wpe.weight"] = tensors["transformer.wpe.weight"][:8]
        return tensors

    _rewrite(copy, change)
    for strict in (True, False):
        with pytest.raises(
            ValueError, match=r"mis-shaped: 'transformer.wpe.weight': file \[8, 32\]"
        ):
            js.models.from_pretrained(copy, strict=strict)


def test_class_that_does_not_match_the_folder(folder):
    class OtherConfig(PretrainedConfig):
        model_type = "bert"

    class OtherModel(PreTrainedModel):
        config_class = OtherConfig

    with pytest.raises(ValueError, match=r"holds a 'gpt2' model.*js.models.from_pretrained"):
        OtherModel.from_pretrained(folder)


def test_bad_arguments(folder):
    with pytest.raises(TypeError, match="floating dtype"):
        js.models.from_pretrained(folder, dtype=jnp.int32)
    with pytest.raises(ValueError, match="mesh is None"):
        from jax.sharding import PartitionSpec

        js.models.from_pretrained(folder, rules=[("*", PartitionSpec())])
    with pytest.raises(TypeError, match="strict"):
        js.models.from_pretrained(folder, strict="yes")  # type: ignore[arg-type]


def test_loading_info_of_another_model():
    with pytest.raises(KeyError, match="not built by from_pretrained"):
        js.models.loading_info(GPT2Model(GPT2Config(**TINY), rngs=js.Rngs(params=0)))


# -- what a file does not hold -----------------------------------------------------------------


class BufferedConfig(PretrainedConfig):
    model_type = "js-test-buffered"
    defaults = {"width": 8, "length": 6}


class Buffered(PreTrainedModel):
    """A family outside the registry with Llama's and BERT's kinds of non-persistent buffers."""

    config_class = BufferedConfig

    def __init__(self, config: BufferedConfig, *, rngs: js.Rngs):
        super().__init__(config)
        self.proj = js.nn.Linear(config.width, config.width, rngs=rngs)
        inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, config.width, 2) / config.width))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("position_ids", jnp.arange(config.length)[None], persistent=False)
        self.register_buffer("scale", jnp.full((config.width,), 2.0))  # persistent

    def forward(self, x):
        return self.proj(x) * self.scale.value


def test_non_persistent_buffers_get_their_real_values(tmp_path):
    model = Buffered(BufferedConfig(), rngs=js.Rngs(params=0))
    model.scale.value = jnp.full((8,), 3.0)
    model.save_pretrained(tmp_path)
    with safetensors.safe_open(str(tmp_path / "model.safetensors"), framework="numpy") as file:
        assert sorted(file.keys()) == ["proj.bias", "proj.weight", "scale"]
    loaded = Buffered.from_pretrained(tmp_path, dtype=jnp.bfloat16)
    assert js.models.loading_info(loaded) == js.models.LoadingInfo([], [], [])
    assert loaded.inv_freq.value.dtype == jnp.float32  # an exact constant keeps its dtype
    np.testing.assert_array_equal(
        np.asarray(loaded.inv_freq.value), np.asarray(model.inv_freq.value)
    )
    assert loaded.position_ids.value.dtype == model.position_ids.value.dtype
    np.testing.assert_array_equal(np.asarray(loaded.position_ids.value), [[0, 1, 2, 3, 4, 5]])
    assert loaded.scale.value.dtype == jnp.bfloat16 and float(loaded.scale.value[0]) == 3.0
    assert loaded.proj.weight.value.dtype == jnp.bfloat16
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(
        np.asarray(loaded(x.astype(jnp.bfloat16)), np.float32), np.asarray(model(x)), rtol=2e-2
    )


def test_the_base_class_picks_the_folders_class(folder):
    model = PreTrainedModel.from_pretrained(folder)
    assert type(model).__name__ == "GPT2LMHeadModel"


@pytest.mark.parametrize(
    "index",
    [
        None,
        (slice(2, 5), slice(None), slice(None)),  # whole rows: one read
        (slice(None), slice(1, 3), slice(None)),  # a column block: blocks of rows
        (slice(1, 6), slice(0, 4), slice(2, 3)),
        (slice(3, 3), slice(None), slice(None)),  # empty
    ],
)
def test_slices_are_read_from_the_file_as_numpy_slices_them(tmp_path, monkeypatch, index):
    from js.models import _weight_files

    monkeypatch.setattr(_weight_files, "_CHUNK", 40)  # several blocks of rows per slice
    rng = np.random.default_rng(0)
    arrays = {
        "a": rng.standard_normal((7, 4, 3)).astype(np.float32),
        "b": np.arange(5, dtype=np.int64),
        "s": np.array(2.5, np.float32),
    }
    safetensors.numpy.save_file(arrays, str(tmp_path / "model.safetensors"))
    weights = _weight_files._Weights(tmp_path)
    got = weights.read("a", index)
    expected = arrays["a"] if index is None else arrays["a"][index]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(weights.read("b", (slice(1, 4),)), arrays["b"][1:4])
    assert weights.read("s").shape == () and float(weights.read("s")) == 2.5
