"""js.models.generate and stream against transformers' generate, the cached decode step against
the uncached forward, the logits warpers against transformers' processors, and the errors."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from gpt2_support import transformers

import js
from js.models import _generation, generate, stream
from js.models._sampling import check_sampling, warp

# Prompts of different lengths, left-padded: 6, 4 and 2 real tokens.
MASK = np.array([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1]])
GPT2 = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=96, n_positions=64, initializer_range=0.3)
LLAMA = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # grouped-query attention
    initializer_range=0.3,
    max_position_embeddings=64,
)


def prompts(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    ids = np.random.default_rng(seed).integers(3, 96, MASK.shape)
    return np.where(MASK == 1, ids, 0), MASK


def pair(kind: str, tmp_path, **overrides):
    """A random transformers model (eval) and the js model loaded from its saved folder."""
    hf = transformers()
    torch.manual_seed(0)
    if kind == "gpt2":
        reference = hf.GPT2LMHeadModel(hf.GPT2Config(**{**GPT2, **overrides}))
    elif kind == "llama":
        reference = hf.LlamaForCausalLM(hf.LlamaConfig(**{**LLAMA, **overrides}))
    else:
        reference = hf.MistralForCausalLM(
            hf.MistralConfig(**{**LLAMA, "sliding_window": 3, **overrides})
        )
    reference.eval()
    reference.save_pretrained(tmp_path / kind)
    return reference, js.models.from_pretrained(tmp_path / kind)


def reference_generate(reference, ids, mask, new: int, eos) -> np.ndarray:
    with torch.inference_mode():
        out = reference.generate(
            torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            max_new_tokens=new,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=0,
        )
    return out.numpy()


@pytest.fixture(scope="module", params=["gpt2", "llama", "mistral"])
def models(request, tmp_path_factory):
    return request.param, *pair(request.param, tmp_path_factory.mktemp(request.param))


def test_greedy_equals_transformers_on_a_left_padded_batch(models):
    kind, reference, model = models
    ids, mask = prompts()
    expected = reference_generate(reference, ids, mask, 12, eos=None)
    out = np.asarray(generate(model, ids, attention_mask=mask, max_new_tokens=12, eos_token_id=[]))
    assert out.shape == (3, 18) and out.dtype == np.int32
    np.testing.assert_array_equal(out, expected)
    assert len({tuple(row) for row in out[:, 6:]}) == 3  # the rows differ: a real test


def test_greedy_with_an_end_token_stops_rows_and_pads_as_transformers(models):
    kind, reference, model = models
    ids, mask = prompts()
    free = reference_generate(reference, ids, mask, 12, eos=None)[:, 6:]
    eos = int(free[1, 3])  # row 1 ends at its 4th new token; others may end at theirs
    expected = reference_generate(reference, ids, mask, 12, eos=eos)
    out = np.asarray(
        generate(
            model, ids, attention_mask=mask, max_new_tokens=12, eos_token_id=eos, pad_token_id=0
        )
    )
    np.testing.assert_array_equal(out, expected)
    assert (out[1, 10:] == 0).all()  # padded after its end token


def test_every_row_ending_stops_the_loop_early(tmp_path):
    reference, model = pair("gpt2", tmp_path)
    ids, mask = prompts()
    first = reference_generate(reference, ids, mask, 1, eos=None)[:, 6]
    eos = sorted(set(first.tolist()))  # each row's first new token ends it
    out = generate(
        model, ids, attention_mask=mask, max_new_tokens=20, eos_token_id=eos, pad_token_id=0
    )
    out = np.asarray(out)
    np.testing.assert_array_equal(out, reference_generate(reference, ids, mask, 20, eos=eos))
    assert out.shape == (3, 7)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_the_cached_step_equals_the_uncached_forward_at_every_step(kind, tmp_path):
    _, model = pair(kind, tmp_path)
    ids, mask = prompts(1)
    cache = model.make_cache(3, 32)
    step = js.jit(lambda model, cache, ids, mask: model(ids, attention_mask=mask, cache=cache))
    steps = [step(model, cache, ids, mask)[:, -1]]  # the prompt, then one token at a time
    sequence = ids
    for _ in range(8):
        token = np.asarray(jnp.argmax(steps[-1], -1))[:, None]
        sequence = np.concatenate([sequence, token], 1)
        steps.append(step(model, cache, token, np.ones_like(token))[:, -1])
    assert int(cache.length.value) == 6 + 8
    # one uncached forward over the whole sequence: position t's logits predict token t + 1
    full_mask = np.concatenate([mask, np.ones((3, 8), mask.dtype)], 1)
    positions = np.where(full_mask == 1, np.cumsum(full_mask, 1) - 1, 0)  # as generate
    forward = js.jit(lambda model, ids, mask, positions: model(ids, mask, position_ids=positions))
    full = forward(model, sequence, full_mask, positions)
    for i, logits in enumerate(steps):
        np.testing.assert_allclose(logits, full[:, 5 + i], rtol=1e-5, atol=2e-5)


def test_the_decode_step_donates_the_cache_and_leaves_the_weights_alone(tmp_path):
    _, model = pair("gpt2", tmp_path)
    cache = model.make_cache(3, 16)
    weight = model.lm_head.weight.value
    old_keys = cache.layer(0).k.value
    step = js.jit(lambda model, cache, ids: model(ids, cache=cache))
    step(model, cache, jnp.ones((3, 2), jnp.int32))
    assert old_keys.is_deleted() and not weight.is_deleted()
    assert model.lm_head.weight.value is weight


def test_a_bf16_cache_generates_close_to_float32(tmp_path):
    _, model = pair("llama", tmp_path)
    ids, mask = prompts()
    full = generate(model, ids, attention_mask=mask, max_new_tokens=4, eos_token_id=[])
    half = generate(
        model, ids, attention_mask=mask, max_new_tokens=4, eos_token_id=[], cache_dtype=jnp.bfloat16
    )
    cache = model.make_cache(3, 32, dtype=jnp.bfloat16)
    assert (
        cache.layer(0).k.value.dtype == jnp.bfloat16 and cache.nbytes == 2 * 2 * 3 * 2 * 32 * 16 * 2
    )
    assert np.mean(np.asarray(full) == np.asarray(half)) > 0.8


def test_a_second_call_of_the_same_buckets_compiles_nothing(tmp_path):
    _, model = pair("gpt2", tmp_path)
    ids, mask = prompts()
    generate(model, ids, attention_mask=mask, max_new_tokens=5)
    traces = dict(_generation.TRACES)
    generate(model, ids, attention_mask=mask, max_new_tokens=5)
    generate(model, ids[:, 1:], attention_mask=mask[:, 1:], max_new_tokens=9)  # same buckets
    assert dict(_generation.TRACES) == traces
    generate(model, np.ones((3, 20), np.int32), max_new_tokens=5)  # prompt bucket 32: compiles
    assert _generation.TRACES["prefill"] == traces["prefill"] + 1


def test_sampling_is_reproducible_from_rngs_and_streams_the_same_tokens(tmp_path):
    _, model = pair("llama", tmp_path)
    ids, mask = prompts()
    options = dict(attention_mask=mask, max_new_tokens=10, do_sample=True, eos_token_id=[])
    options.update(temperature=0.8, top_k=20, top_p=0.9)
    first = generate(model, ids, rngs=js.Rngs(sample=3), **options)
    again = generate(model, ids, rngs=js.Rngs(sample=3), **options)
    other = generate(model, ids, rngs=js.Rngs(sample=4), **options)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    chunks = list(stream(model, ids, chunk=4, rngs=js.Rngs(sample=3), **options))
    assert [c.shape[1] for c in chunks] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate(chunks, 1), np.asarray(first)[:, 6:])


def test_stream_of_greedy_tokens_equals_generate(tmp_path):
    _, model = pair("gpt2", tmp_path)
    ids, mask = prompts()
    whole = np.asarray(generate(model, ids, attention_mask=mask, max_new_tokens=7))
    chunks = list(model.stream(ids, attention_mask=mask, max_new_tokens=7, chunk=3))
    assert [c.shape[1] for c in chunks] == [3, 3, 1]
    np.testing.assert_array_equal(np.concatenate(chunks, 1), whole[:, 6:])
    np.testing.assert_array_equal(model.generate(ids, attention_mask=mask, max_new_tokens=7), whole)


LOGITS = np.random.default_rng(0).normal(size=(4, 50)).astype(np.float32) * 3


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [
        (0.7, None, None),
        (1.0, 5, None),
        (1.0, None, 0.8),
        (1.3, 10, 0.6),
        (0.5, 1, 0.3),
        (1.0, 60, 0.999),
        (2.0, None, 0.05),
    ],
)
def test_the_warpers_equal_transformers_logits_processors(temperature, top_k, top_p):
    hf = transformers()
    from transformers.generation import logits_process as lp

    processors = []
    if temperature != 1.0:
        processors.append(lp.TemperatureLogitsWarper(temperature))
    if top_k:
        processors.append(lp.TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        processors.append(lp.TopPLogitsWarper(top_p))
    expected = hf.LogitsProcessorList(processors)(None, torch.tensor(LOGITS)).numpy()
    rule, values = check_sampling(True, temperature, top_k, top_p)
    got = np.asarray(warp(jnp.asarray(LOGITS), rule, jnp.asarray(values)))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    np.testing.assert_array_equal(got, expected)
    assert np.isinf(got).any() or (top_k is None and top_p is None)


def test_bad_requests_are_refused_before_anything_runs(tmp_path):
    _, model = pair("gpt2", tmp_path)
    ids, mask = prompts()
    cases = [
        (dict(max_new_tokens=0), ValueError, "max_new_tokens must be >= 1"),
        (
            dict(max_new_tokens=4, top_p=0.0, do_sample=True),
            ValueError,
            r"top_p must be in \(0, 1\]",
        ),
        (
            dict(max_new_tokens=4, top_p=1.5, do_sample=True),
            ValueError,
            r"top_p must be in \(0, 1\]",
        ),
        (dict(max_new_tokens=4, temperature=0.0, do_sample=True), ValueError, "temperature"),
        (dict(max_new_tokens=4, do_sample=True), TypeError, r"rngs=js.Rngs\(sample=0\)"),
        (dict(max_new_tokens=60), ValueError, "shorten the prompt to at most 4 tokens"),
    ]
    for options, error, message in cases:
        with pytest.raises(error, match=message):
            generate(model, ids, attention_mask=mask, **options)
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 96\)"):
        generate(model, ids + 90, max_new_tokens=3)
    with pytest.raises(TypeError, match="eos_token_id must be an int or a list of ints"):
        generate(model, ids, max_new_tokens=3, eos_token_id=2.5)
    with pytest.raises(ValueError, match="the prompt is empty"):
        generate(model, np.zeros((2, 0), np.int32), max_new_tokens=3)
    with pytest.raises(ValueError, match="needs left padding"):
        generate(model, ids, attention_mask=mask[:, ::-1], max_new_tokens=3)
    with pytest.raises(ValueError, match=r"ids\[None\]"):
        generate(model, ids[0], max_new_tokens=3)
    with pytest.raises(TypeError, match="no make_cache"):
        generate(js.nn.Linear(2, 2, rngs=js.Rngs(params=0)), ids, max_new_tokens=3)
    with pytest.raises(ValueError, match="chunk must be an int >= 1"):
        stream(model, ids, max_new_tokens=3, chunk=0)
    with pytest.raises(TypeError, match="'temprature'. It takes generate's arguments"):
        stream(model, ids, max_new_tokens=3, temprature=0.5)


def test_calls_in_two_threads_do_not_share_a_cache(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    _, model = pair("llama", tmp_path)
    ids, mask = prompts()
    expected = [
        np.asarray(generate(model, ids[:, i:], attention_mask=mask[:, i:], max_new_tokens=6))
        for i in (0, 1)
    ]
    with ThreadPoolExecutor(2) as pool:
        runs = [
            pool.submit(generate, model, ids[:, i:], attention_mask=mask[:, i:], max_new_tokens=6)
            for i in (0, 1) * 4
        ]
        for i, run in zip((0, 1) * 4, runs, strict=True):
            np.testing.assert_array_equal(run.result(), expected[i])


def test_padding_is_read_as_a_real_token_whatever_pad_token_id_is():
    # GPT2Config's end (and so pad) token 50256 lies outside this vocabulary of 20: the prompt's
    # bucket padding and the caller's own padding must not be embedded as that id (a NaN row)
    config = js.models.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=20, n_positions=64)
    model = js.models.GPT2LMHeadModel(config, rngs=js.Rngs(params=0)).eval()
    ids, mask = np.array([[1, 2, 3], [-1, 5, 6]]), np.array([[1, 1, 1], [0, 1, 1]])
    out = np.asarray(model.generate(ids, attention_mask=mask, max_new_tokens=1))
    positions = np.where(mask == 1, np.cumsum(mask, 1) - 1, 0)
    logits = model(np.where(mask == 1, ids, 0), attention_mask=mask, position_ids=positions)
    np.testing.assert_array_equal(out[:, 3], np.asarray(logits[:, -1]).argmax(-1))


def test_the_generation_contract_is_a_protocol(tmp_path):
    _, model = pair("llama", tmp_path)
    assert isinstance(model, js.models.CausalLM)

    class NoCache(js.Module):
        def forward(self, input_ids, attention_mask=None, *, cache=None, logits_to_keep=0):
            return jnp.zeros((*jnp.shape(input_ids), 8))

    assert not isinstance(NoCache(), js.models.CausalLM)
    with pytest.raises(TypeError, match=r"NoCache has no make_cache\(\).*js.models.CausalLM"):
        generate(NoCache(), np.ones((1, 2), np.int32), max_new_tokens=1)
