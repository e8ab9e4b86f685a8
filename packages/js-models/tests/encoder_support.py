"""One harness for the encoder families' tests against transformers (issue 34).

A family's test file declares its cases (transformers class name, config keys) and calls:

- ``reference(hf_class, keys, folder)``: a random ``transformers.<hf_class>`` (eval, float32)
  of config ``keys`` (``vocab_size`` ``VOCAB`` unless given), every 1-D weight (norms, biases)
  perturbed so that a dropped or mis-formulated tensor cannot pass, saved with
  ``save_pretrained``;
- ``loads_both_ways(reference_model, folder, out)``: js's ``from_pretrained`` (the class
  transformers names, nothing missing, unexpected or ignored) on the padded batch against
  transformers', then js's ``save_pretrained`` folder read back by transformers (nothing
  missing or unexpected) against js; returns both relative differences.

Outputs are compared as lists: transformers' ``logits`` (or ``start_logits``/``end_logits``,
or ``last_hidden_state``/``pooler_output``) against js's array or tuple, None left out, each by
``relative_error`` (``max|got - expected| / max|expected|``; the worst is returned), padded
positions included. The batch: 3 rows of 8 tokens, right-padded to 8, 5 and 3 real tokens with
the config's ``pad_token_id``, two segments where the family has token types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
from family_support import perturb
from family_support import relative_error as _relative_error
from llama_support import transformers_without_torchvision

import js.models

VOCAB = 100
MASK = np.array([[1] * 8, [1] * 5 + [0] * 3, [1] * 3 + [0] * 5])
TOKENS = np.random.default_rng(0).integers(4, VOCAB, MASK.shape)  # no special ids 0-3
TYPES = (np.arange(8) >= 4) * MASK  # segment 1 from position 4 on, 0 on padding


def reference(hf_class: str, keys: dict[str, Any], folder: Path, *, seed: int = 0) -> Any:
    """A perturbed random ``transformers.<hf_class>`` of config ``keys``, saved to ``folder``."""
    import torch

    with transformers_without_torchvision() as transformers:
        cls = getattr(transformers, hf_class)  # lazy import, torchvision hidden
    torch.manual_seed(seed)
    model = cls(cls.config_class(**{"vocab_size": VOCAB, **keys})).eval()
    perturb(model, seed)
    model.save_pretrained(folder)
    return model


def batch(config: Any) -> dict[str, np.ndarray]:
    """The padded batch for a model of ``config``: ids padded with its ``pad_token_id``, the
    mask and, with ``type_vocab_size`` > 1, token types."""
    pad = config.pad_token_id or 0
    args = {"input_ids": np.where(MASK == 1, TOKENS, pad), "attention_mask": MASK}
    if getattr(config, "type_vocab_size", 1) > 1:
        args["token_type_ids"] = TYPES
    return args


def torch_outputs(model: Any, args: dict[str, np.ndarray]) -> list[np.ndarray]:
    """transformers' outputs of ``model`` on ``args``, in js's order."""
    import torch

    with torch.no_grad():
        out = model(**{key: torch.tensor(value) for key, value in args.items()})
    names = ("logits", "start_logits", "end_logits", "last_hidden_state", "pooler_output")
    return [getattr(out, n).numpy() for n in names if getattr(out, n, None) is not None]


def js_outputs(model: Any, args: dict[str, np.ndarray]) -> list[np.ndarray]:
    """js's outputs of ``model`` on ``args`` (an array or a tuple), None left out."""
    out = model(**{key: jnp.asarray(value) for key, value in args.items()})
    return [np.asarray(x) for x in (out if isinstance(out, tuple) else (out,)) if x is not None]


def relative_error(got: list[Any], expected: list[Any]) -> float:
    """The worst ``max|got - expected| / max|expected|`` over paired outputs (same shapes)."""
    assert [np.shape(x) for x in got] == [np.shape(x) for x in expected], (
        [np.shape(x) for x in got],
        [np.shape(x) for x in expected],
    )
    return max(_relative_error(a, b) for a, b in zip(got, expected, strict=True))


def loads_both_ways(reference_model: Any, folder: Path, out: Path) -> tuple[float, float]:
    """(js from transformers' folder against transformers, transformers from js's folder
    against js): the outputs' relative differences on the padded batch."""
    model = js.models.from_pretrained(folder)
    assert type(model).__name__ == type(reference_model).__name__, type(model)
    info = js.models.loading_info(model)
    assert not (info.missing_keys or info.unexpected_keys or info.ignored_keys), info
    args = batch(reference_model.config)
    ours = js_outputs(model, args)
    there = relative_error(ours, torch_outputs(reference_model, args))
    model.save_pretrained(out)
    back, loaded = type(reference_model).from_pretrained(out, output_loading_info=True)
    assert not (loaded["missing_keys"] or loaded["unexpected_keys"]), loaded
    return there, relative_error(torch_outputs(back.eval(), args), ours)
