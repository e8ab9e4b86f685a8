"""Eval-mode forward latency (inference) of the digits CNN and the transformer block, batch 1 and
batch 256: js (``js.jit`` of ``model(x)``), the ``js.export`` artifact (weights baked in,
``jax.jit(exported.call)``), hand-written ``jax.jit`` over a dict of arrays, and torch eager
under ``torch.inference_mode()`` (torch's own thread count: every core, as XLA uses).

Goal (issue 11): js and the exported artifact within 1.05x of hand-written JAX. Every variant's
output is checked against the hand-written one when the workload is built.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import js
import js.nn as nn
from js.nn.attention import causal_mask

from . import _common as C
from ._harness import Variant, program_bytes

BATCHES = (1, 256)


@js.jit
def js_forward(model, *inputs):
    return model(*inputs)


def _conv(x, w, b):
    y = jax.lax.conv_general_dilated(
        x, w, (1, 1), [(1, 1), (1, 1)], dimension_numbers=("NCHW", "OIHW", "NCHW")
    )
    return y + b[None, :, None, None]


def _bn_eval(x, p, name):
    scale = p[f"{name}.weight"] * jax.lax.rsqrt(p[f"{name}.running_var"] + 1e-5)
    shift = p[f"{name}.bias"] - p[f"{name}.running_mean"] * scale
    return x * scale[None, :, None, None] + shift[None, :, None, None]


def _digits_forward(p, x):
    h = jax.nn.relu(_bn_eval(_conv(x, p["conv1.weight"], p["conv1.bias"]), p, "bn1"))
    h = jax.nn.relu(_bn_eval(_conv(h, p["conv2.weight"], p["conv2.bias"]), p, "bn2"))
    B, C_, H, W = h.shape
    h = h.reshape(B, C_, H // 2, 2, W // 2, 2).max(axis=(3, 5))  # 2x2 max pool, [B, C, H/2, W/2]
    return h.reshape(B, -1) @ p["fc.weight"].T + p["fc.bias"]  # [B, 10]


def _block_forward(p, x, mask):
    from ._transformer import _attention, _ln

    h = _ln(x, p["ln1.weight"], p["ln1.bias"])
    x = x + _attention(p, h, mask)
    h = _ln(x, p["ln2.weight"], p["ln2.bias"]) @ p["fc1.weight"].T + p["fc1.bias"]
    return x + jax.nn.gelu(h, approximate=False) @ p["fc2.weight"].T + p["fc2.bias"]


def _torch_digits(model):
    import torch

    c1, c2 = model.conv1.out_channels, model.conv2.out_channels

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = torch.nn.Conv2d(1, c1, 3, padding=1), torch.nn.BatchNorm2d(c1)
            self.conv2, self.bn2 = torch.nn.Conv2d(c1, c2, 3, padding=1), torch.nn.BatchNorm2d(c2)
            self.fc = torch.nn.Linear(c2 * 16, 10)

        def forward(self, x):
            h = torch.relu(self.bn1(self.conv1(x)))
            h = torch.nn.functional.max_pool2d(torch.relu(self.bn2(self.conv2(h))), 2)
            return self.fc(h.flatten(1))

    return Net()


def _torch_variant(t_model, model, inputs) -> Variant:
    import torch

    t_model.load_state_dict({k: torch.from_numpy(v) for k, v in nn.torch_state_dict(model).items()})
    t_model.eval()
    t_inputs = tuple(torch.from_numpy(np.asarray(a)) for a in inputs)

    def run():
        with torch.inference_mode():
            return t_model(*t_inputs)

    return Variant(step=run)


def _variants(model, hand_written, inputs, torch_model, torch_inputs) -> dict[str, Variant]:
    model.eval()
    params = {k: jnp.asarray(v) for k, v in model.state_dict().items()}
    inputs = tuple(jnp.asarray(a) for a in inputs)
    jitted = jax.jit(hand_written)
    # The artifact as a user gets it: serialized, reloaded, batch dimension symbolic.
    blob = js.export(model, *inputs, dynamic_batch=(0,)).serialize()
    exported = jax.jit(jax.export.deserialize(blob).call)
    out = {
        "js": C.js_variant(js_forward, model, *inputs),
        "jax": Variant(
            step=lambda: jitted(params, *inputs),
            memory=lambda: program_bytes(jitted.lower(params, *inputs).compile()),
        ),
        "exported": Variant(step=lambda: exported(*inputs)),
    }
    if C.HAVE_TORCH and torch_model is not None:
        out["torch"] = _torch_variant(torch_model(), model, torch_inputs)
    reference = np.asarray(jitted(params, *inputs))
    for name, variant in out.items():
        got = variant.step()
        got = got.numpy() if hasattr(got, "numpy") and not isinstance(got, jax.Array) else got
        scale = max(1.0, float(np.max(np.abs(reference))))
        if float(np.max(np.abs(np.asarray(got) - reference))) > 1e-4 * scale:
            raise AssertionError(f"inference bench: {name} disagrees with hand-written JAX")
    return out


def digits(batch: int, c1: int = 32, c2: int = 64) -> dict[str, Variant]:
    from ._digits import DigitsCNN

    model = DigitsCNN(c1, c2, rngs=js.Rngs(params=0))
    x = np.random.default_rng(0).random((batch, 1, 8, 8), dtype=np.float32)
    model(jnp.asarray(x[:8] if batch >= 8 else np.tile(x, (8, 1, 1, 1))), rngs=js.Rngs(dropout=0))
    torch_model = (lambda: _torch_digits(model)) if C.HAVE_TORCH else None
    return _variants(model, _digits_forward, (x,), torch_model, (x,))


def transformer(batch: int, steps: int = 128, dim: int = 256) -> dict[str, Variant]:
    from ._transformer import Block, _torch_model

    model = Block(dim, rngs=js.Rngs(params=0))
    x = np.random.default_rng(0).standard_normal((batch, steps, dim)).astype(np.float32)
    mask = np.asarray(causal_mask(steps))  # [1, 1, T, T], True = attend
    torch_model = (lambda: _torch_model(dim)) if C.HAVE_TORCH else None
    return _variants(model, _block_forward, (x, mask), torch_model, (x, ~mask[0, 0]))


def workloads(size: dict):
    """``(name, build)`` for each inference workload; ``size``: ``cnn=(c1, c2)``, ``tr=(T, D)``."""
    for batch in BATCHES:
        yield f"inference digits CNN B={batch}", lambda b=batch: digits(b, *size["cnn"])
    for batch in BATCHES:
        yield f"inference transformer B={batch}", lambda b=batch: transformer(b, *size["tr"])
