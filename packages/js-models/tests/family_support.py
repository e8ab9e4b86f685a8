"""One harness for every decoder family's tests against transformers.

A family's test file declares its cases (transformers class name, config keys) and calls:

- ``reference(transformers, hf_class, keys, folder)``: a random transformers model, every 1-D
  weight (norms, biases) perturbed so that a dropped or mis-formulated tensor cannot pass,
  saved with ``save_pretrained``;
- ``loads_both_ways(transformers, model, folder, tmp_path)``: js's ``from_pretrained`` logits on
  a padded batch against transformers', then js's ``save_pretrained`` folder read back by
  transformers with the same logits; returns both relative differences;
- ``greedy_matches(model, reference)``: js's greedy ``generate`` against transformers'
  ``generate(do_sample=False)`` on a left-padded batch, ``NEW`` tokens past the prompt.

A test module with ``CASES`` (name -> (transformers class, js class, config keys)) makes its
``case`` fixture with ``case_fixture(CASES, SIZES)`` (``transformers`` is conftest's fixture),
and its two tests call ``loads_and_saves`` and ``greedy_case``.

Sizes: a vocabulary of 96, prompts of 7 tokens (left-padded to 7, 5 and 3 real tokens), so that
windows of 3 or 4 are shorter than the prompt and far shorter than prompt plus new tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import js.models

VOCAB = 96
NEW = 24  # new tokens: far past every test window
MASK = np.array([[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1]])
IDS = np.where(MASK == 1, np.random.default_rng(0).integers(3, VOCAB, MASK.shape), 0)


def relative_error(got, expected) -> float:
    """``max|got - expected| / max|expected|``."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def perturb(model, seed: int = 0) -> None:
    """Add noise to every 1-D weight of a torch model (norm scales, biases, ...)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, parameter in model.named_parameters():
            if parameter.ndim == 1:
                parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))


def randomize(model, seed: int = 0, *, parameters: bool = True) -> None:
    """Random BatchNorm running statistics of a torch model (means ``0.2 N(0, 1)``, variances in
    ``[0.5, 1.5)``) and, with ``parameters``, random values for every 1-D parameter (``0.5 +
    0.3 N(0, 1)``: biases, norm weights, layer-scale gammas), so none sits at its initial value."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.2)
            elif name.endswith("running_var"):
                buffer.copy_(torch.rand(buffer.shape, generator=generator) + 0.5)
        for _, parameter in model.named_parameters() if parameters else ():
            if parameter.ndim == 1:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3 + 0.5)


def reference(transformers, hf_class: str, keys: dict, folder: Path, *, seed: int = 0):
    """A perturbed random ``transformers.<hf_class>`` (eval, float32) of config ``keys``, saved
    to ``folder``."""
    import torch

    torch.manual_seed(seed)
    cls = getattr(transformers, hf_class)
    model = cls(cls.config_class(**{"vocab_size": VOCAB, **keys})).eval()
    perturb(model, seed)
    model.save_pretrained(folder)
    return model


def torch_logits(model, ids=IDS, mask=MASK) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model(torch.tensor(ids), attention_mask=torch.tensor(mask))
    return out.logits.float().numpy()


def js_logits(model, ids=IDS, mask=MASK) -> np.ndarray:
    return np.asarray(model(jnp.asarray(ids), attention_mask=jnp.asarray(mask)))


def loads_both_ways(transformers, reference_model, folder: Path, out: Path) -> tuple[float, float]:
    """(js from transformers' folder, transformers from js's folder): the logits' relative
    differences on the padded batch. The first is js's model against transformers'; the
    second is transformers reading the folder js's model saved, against js's model."""
    model = js.models.from_pretrained(folder)
    ours = js_logits(model)
    there = relative_error(ours, torch_logits(reference_model))
    model.save_pretrained(out)
    back = type(reference_model).from_pretrained(out).eval()
    back_error = relative_error(torch_logits(back), ours)
    return there, back_error


def greedy_matches(model, reference_model, new: int = NEW) -> np.ndarray:
    """js's greedy tokens (asserted equal to transformers'); returns them."""
    import torch

    # Neither side stops at an end token (a config's eos id may lie inside the tiny vocabulary):
    # transformers' generation config loses its eos, js gets eos_token_id=[].
    reference_model.generation_config.eos_token_id = None
    with torch.inference_mode():
        expected = reference_model.generate(
            torch.tensor(IDS),
            attention_mask=torch.tensor(MASK),
            max_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        ).numpy()
    assert expected.shape == (len(IDS), IDS.shape[1] + new), expected.shape
    got = np.asarray(
        js.models.generate(model, IDS, attention_mask=MASK, max_new_tokens=new, eos_token_id=[])
    )
    np.testing.assert_array_equal(got, expected)
    return got


def case_fixture(cases: dict, sizes: dict | None = None):
    """A module's ``case`` fixture: ``(name, transformers reference model, its folder)``, one
    per entry of ``cases`` (name -> (transformers class, js class, config keys beyond
    ``sizes``)), each built once for the module."""

    @pytest.fixture(scope="module", params=list(cases))
    def case(request, transformers, tmp_path_factory):
        name = request.param
        hf_class, _, keys = cases[name]
        folder = tmp_path_factory.mktemp(name)
        return name, reference(transformers, hf_class, {**(sizes or {}), **keys}, folder), folder

    return case


def loads_and_saves(transformers, case, cases: dict, tmp_path: Path) -> dict:
    """The case's folder loads as its js class and both ways within 1e-4 (``loads_both_ways``),
    and js's ``config.json`` names transformers' class and model type; returns that file."""
    name, reference_model, folder = case
    hf_class, js_class, _ = cases[name]
    assert type(js.models.from_pretrained(folder)) is js_class
    there, back = loads_both_ways(transformers, reference_model, folder, tmp_path)
    print(name, {"js from transformers": there, "transformers from js": back})
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == [hf_class]
    assert written["model_type"] == js_class.config_class.model_type
    assert there < 1e-4 and back < 1e-4
    return written


def greedy_case(case) -> np.ndarray:
    """``greedy_matches`` for the case's folder; returns js's tokens."""
    name, reference_model, folder = case
    tokens = greedy_matches(js.models.from_pretrained(folder), reference_model)
    print(name, "greedy tokens match", tokens[:, -8:].tolist())
    return tokens
