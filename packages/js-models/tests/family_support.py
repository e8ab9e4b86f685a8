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

Sizes: a vocabulary of 96, prompts of 7 tokens (left-padded to 7, 5 and 3 real tokens), so that
windows of 3 or 4 are shorter than the prompt and far shorter than prompt plus new tokens.
"""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np

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
