"""js.models' rotary tables (_rope.py) against transformers 5.23: every rope type's cos/sin
against transformers' rotary embedding modules (ROPE_INIT_FUNCTIONS + dynamic_rope_update), at
positions below and past the original context, and Llama models with yarn and dynamic rope
loaded both ways (family_support's harness)."""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from family_support import greedy_matches, loads_both_ways, reference  # noqa: E402
from llama_support import transformers_without_torchvision  # noqa: E402

import js  # noqa: E402
from js.models import llama  # noqa: E402
from js.models._rope import rope_cos_sin  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

HEAD = dict(hidden_size=128, num_attention_heads=4)  # head_dim 32: 16 frequencies
FACTORS = np.random.default_rng(1)
SHORT, LONG = (list(map(float, FACTORS.uniform(1.0, 6.0, 16))) for _ in range(2))
# name -> (config keys: rope_parameters and contexts, positions' lengths to compare)
CASES = {
    "default": (dict(rope_parameters={"rope_type": "default", "rope_theta": 500.0}), (40,)),
    "linear": (dict(rope_parameters={"rope_type": "linear", "factor": 3.0}), (40,)),
    "llama3": (
        dict(
            max_position_embeddings=64,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 5e5,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),
        (40,),
    ),
    # past max_position_embeddings (16) theta grows with the call's length
    "dynamic": (
        dict(max_position_embeddings=16, rope_parameters={"rope_type": "dynamic", "factor": 2.5}),
        (10, 16, 17, 40),
    ),
    # a ramp between dims 2 and 6 (of 16): interpolated, blended and original frequencies
    "yarn": (
        dict(
            max_position_embeddings=8192,
            rope_parameters={
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 2048,
            },
        ),
        (40,),
    ),
    "yarn_mscale": (
        dict(
            max_position_embeddings=8192,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 1000.0,
                "factor": 40.0,
                "mscale": 1.0,
                "mscale_all_dim": 0.707,
                "beta_fast": 16,
                "beta_slow": 2,
                "truncate": False,
                "original_max_position_embeddings": 4096,
            },
        ),
        (40,),
    ),
    "yarn_attention_factor": (
        dict(
            max_position_embeddings=64,
            rope_parameters={
                "rope_type": "yarn",
                "factor": 2.0,
                "attention_factor": 0.8,
                "original_max_position_embeddings": 32,
            },
        ),
        (40,),
    ),
    # short factors up to 8 positions, long ones past; attention factor from 64 / 8
    "longrope": (
        dict(
            max_position_embeddings=64,
            rope_parameters={
                "rope_type": "longrope",
                "short_factor": SHORT,
                "long_factor": LONG,
                "original_max_position_embeddings": 8,
            },
        ),
        (5, 8, 9, 40),
    ),
    "longrope_factors": (
        dict(
            max_position_embeddings=64,
            rope_parameters={
                "rope_type": "longrope",
                "short_factor": SHORT,
                "long_factor": LONG,
                "factor": 3.0,
                "attention_factor": 1.3,
                "original_max_position_embeddings": 8,
            },
        ),
        (8, 9),
    ),
}


@pytest.fixture(scope="module")
def transformers():
    with transformers_without_torchvision() as module:
        yield module


def _positions(length: int) -> np.ndarray:
    """``[2, 40]``, one shape for every length (so that eager ops compile once): row 0 ends
    with ``0 .. length - 1``, row 1 with ``0 .. length - 4``; zeros before (left padding)."""
    positions = np.zeros((2, 40), np.int64)
    positions[0, 40 - length :] = np.arange(length)
    positions[1, 40 - length :] = np.maximum(np.arange(length) - 3, 0)
    return positions


def _compare(rotary_class, config, js_config, dim: int, lengths) -> float:
    worst = 0.0
    for length in lengths:
        # a fresh module per call: transformers' dynamic rope remembers the longest length
        module = rotary_class(config)
        positions = _positions(length)
        with torch.no_grad():
            cos, sin = module(torch.zeros(1, dtype=torch.float32), torch.tensor(positions))
        got = rope_cos_sin(
            "test",
            js_config.rope_parameters,
            dim,
            jnp.asarray(positions),
            jnp.float32,
            max_position_embeddings=getattr(js_config, "max_position_embeddings", None),
        )
        for mine, theirs in zip(got, (cos, sin), strict=True):
            assert mine.shape == tuple(theirs.shape)
            worst = max(worst, float(np.abs(np.asarray(mine) - theirs.numpy()).max()))
    return worst


@pytest.mark.parametrize("case", list(CASES))
def test_cos_sin_match_transformers(transformers, case):
    keys, lengths = CASES[case]
    config = transformers.LlamaConfig(**HEAD, **keys)
    js_config = llama.LlamaConfig(**HEAD, **keys)
    assert js_config.rope_parameters == config.rope_parameters
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    worst = _compare(LlamaRotaryEmbedding, config, js_config, 32, lengths)
    print(case, "max |cos/sin difference|", worst)
    assert worst <= 1e-6, (case, worst)


@pytest.mark.parametrize("case", ["dynamic", "longrope"])
def test_compiled_once_for_every_length(case):
    """The call's length is traced: one program, the short/long (or grown) tables chosen by
    the positions' values (a padded row's zeros do not count)."""
    import jax

    keys, lengths = CASES[case]
    config = llama.LlamaConfig(**HEAD, **keys)
    traces = []

    @jax.jit
    def table(positions):
        traces.append(1)
        return rope_cos_sin(
            "test",
            config.rope_parameters,
            32,
            positions,
            jnp.float32,
            max_position_embeddings=config.max_position_embeddings,
        )

    for length in lengths:
        positions = _positions(length)
        eager = rope_cos_sin(
            "test",
            config.rope_parameters,
            32,
            jnp.asarray(positions),
            jnp.float32,
            max_position_embeddings=config.max_position_embeddings,
        )
        for got, expected in zip(table(jnp.asarray(positions)), eager, strict=True):
            np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=0, atol=1e-6)
    assert len(traces) == 1


def test_partial_rotary_longrope_matches_phi3(transformers):
    """Phi-3's rotary module over half the head (partial_rotary_factor 0.5): 8 frequencies."""
    rope = {
        "rope_type": "longrope",
        "short_factor": SHORT[:8],
        "long_factor": LONG[:8],
        "partial_rotary_factor": 0.5,
    }
    keys = dict(**HEAD, max_position_embeddings=64, original_max_position_embeddings=8)
    config = transformers.Phi3Config(**keys, rope_parameters=dict(rope))
    js_config = llama.LlamaConfig(**keys, rope_parameters=dict(rope))
    assert js_config.rope_parameters["original_max_position_embeddings"] == 8
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    worst = _compare(Phi3RotaryEmbedding, config, js_config, 16, (5, 9, 40))
    print("phi3 partial longrope", worst)
    assert worst <= 1e-6


@pytest.mark.parametrize(
    ("rope", "match"),
    [
        ({"rope_type": "su", "factor": 2.0}, "rope_type 'su' is not supported; supported: "),
        ({"rope_type": "dynamic"}, "rope_type 'dynamic' needs 'factor'"),
        ({"rope_type": "longrope", "short_factor": [1.0] * 8}, "needs 'long_factor'"),
    ],
)
def test_unsupported_or_incomplete_rope_fails_at_build(rope, match):
    config = llama.LlamaConfig(**HEAD, num_hidden_layers=1, vocab_size=16, rope_parameters=rope)
    with pytest.raises((NotImplementedError, KeyError), match=match):
        llama.LlamaForCausalLM(config, rngs=js.Rngs(params=0))


def test_longrope_factors_of_the_wrong_length():
    rope = {"rope_type": "longrope", "short_factor": [1.0] * 3, "long_factor": [1.0] * 3}
    config = llama.LlamaConfig(**HEAD, rope_parameters=rope)
    with pytest.raises(ValueError, match=r"'short_factor'\] must hold 16 numbers"):
        rope_cos_sin(
            "test",
            config.rope_parameters,
            32,
            jnp.arange(4)[None],
            jnp.float32,
            max_position_embeddings=64,
        )


# Llama models: dynamic past a context of 4 (the prompts are 7 long), yarn from a context of 4
MODELS = {
    "dynamic": dict(
        max_position_embeddings=4, rope_scaling={"rope_type": "dynamic", "factor": 2.0}
    ),
    "yarn": dict(
        max_position_embeddings=64,
        rope_scaling={
            "rope_type": "yarn",
            "factor": 4.0,
            "beta_fast": 8,
            "beta_slow": 0.5,
            "original_max_position_embeddings": 16,
        },
        rope_theta=100.0,
    ),
}
SIZES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    initializer_range=0.3,  # attention sharp enough that the rotation shows in the tokens
    # transformers' min_new_tokens bans the end token: Llama's default (2) is in the vocabulary
    eos_token_id=None,
)


@pytest.fixture(scope="module", params=list(MODELS))
def model_case(request, transformers, tmp_path_factory):
    name = request.param
    folder = tmp_path_factory.mktemp(name)
    keys = {**SIZES, **MODELS[name]}
    return name, reference(transformers, "LlamaForCausalLM", keys, folder), folder


def test_llama_loads_both_ways(transformers, model_case, tmp_path):
    name, reference_model, folder = model_case
    there, back = loads_both_ways(transformers, reference_model, folder, tmp_path)
    print(name, "relative logit differences: js from transformers", there, "back", back)
    assert there < 1e-4 and back < 1e-4, (name, there, back)


def test_llama_greedy_dynamic(transformers, tmp_path):
    """Generation past the context: dynamic's theta grows at every step, in both (inside
    js.models.generate's compiled decode loop, a traced length)."""
    keys = {**SIZES, **MODELS["dynamic"]}
    reference_model = reference(transformers, "LlamaForCausalLM", keys, tmp_path)
    tokens = greedy_matches(js.models.from_pretrained(tmp_path), reference_model)
    print("dynamic greedy tokens equal:", tokens[:, -8:].tolist())
