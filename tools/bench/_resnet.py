"""ResNet-18 on 3x32x32 inputs, batch 32, 10 classes: torchvision's BasicBlock network; Adam.

The stem is the CIFAR one (a 3x3 convolution, stride 1, and no max-pool), not ImageNet's 7x7
stride-2 convolution and 3x3 stride-2 max pool: on 32x32 inputs the CIFAR stem is what people
run (ImageNet's would shrink them to 8x8 before the first block). The four stages (2 BasicBlocks
each, widths 64-128-256-512, stride 2 from the second stage on, 1x1 projection shortcuts), the
global average pool and the linear head are torchvision's ``resnet18``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import js
import js.losses as losses
import js.nn as nn
import js.optim

from . import _common as C
from ._cnn import _bn, batch_norm_before
from ._harness import Variant

CLASSES = 10


def plan(width: int) -> list[tuple[str, int, int, int]]:
    """Every BasicBlock as ``(path, in_channels, out_channels, stride)``."""
    blocks, cin = [], width
    for stage in range(4):
        cout = width * 2**stage
        for i in range(2):
            stride = 2 if stage and not i else 1
            blocks.append((f"layer{stage + 1}.{i}", cin, cout, stride))
            cin = cout
    return blocks


class BasicBlock(js.Module):
    """``relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))``, torchvision's block."""

    def __init__(self, cin: int, cout: int, stride: int, *, rngs):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False, rngs=rngs)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = nn.Identity()
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False, rngs=rngs), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        h = jax.nn.relu(self.bn1(self.conv1(x)))
        return jax.nn.relu(self.bn2(self.conv2(h)) + self.downsample(x))


class ResNet18(js.Module):
    """``[B, 3, S, S] -> [B, 10]``: CIFAR stem, 4 stages of 2 BasicBlocks, mean pool, linear."""

    def __init__(self, width: int = 64, *, rngs):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(width)
        stages: dict[str, list] = {}
        for path, cin, cout, stride in plan(width):
            stages.setdefault(path.split(".")[0], []).append(
                BasicBlock(cin, cout, stride, rngs=rngs)
            )
        self.layer1, self.layer2, self.layer3, self.layer4 = (
            nn.Sequential(*stages[f"layer{i}"]) for i in range(1, 5)
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8 * width, CLASSES, rngs=rngs)

    def forward(self, x):
        x = jax.nn.relu(self.bn1(self.conv1(x)))  # [B, w, S, S]
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))  # [B, 8w, S/8, S/8]
        return self.fc(self.pool(x).reshape(x.shape[0], -1))  # [B, 10]


def js_step_fn(model, optimizer, x, y):
    def loss_fn(model):
        return losses.cross_entropy(model(x), y)

    loss, grads = js.value_and_grad(loss_fn)(model)
    optimizer.step(grads)
    return loss


js_step = js.jit(js_step_fn)


# -- hand-written: NCHW/OIHW like the js layers; BatchNorm statistics threaded as extra state.


def _conv(x, w, stride: int):
    pad = w.shape[-1] // 2
    return jax.lax.conv_general_dilated(
        x, w, (stride, stride), [(pad, pad)] * 2, dimension_numbers=("NCHW", "OIHW", "NCHW")
    )


def _conv_bn(p, stats, x, conv: str, bn: str, stride: int):
    y, stats[bn] = _bn(
        _conv(x, p[f"{conv}.weight"], stride), p[f"{bn}.weight"], p[f"{bn}.bias"], *stats[bn]
    )
    return y


def forward(p, stats, x, width: int):
    """The network by hand; ``stats`` ``{bn path: (mean, var)}`` is returned updated."""
    stats = dict(stats)
    x = jax.nn.relu(_conv_bn(p, stats, x, "conv1", "bn1", 1))
    for path, cin, cout, stride in plan(width):
        h = jax.nn.relu(_conv_bn(p, stats, x, f"{path}.conv1", f"{path}.bn1", stride))
        h = _conv_bn(p, stats, h, f"{path}.conv2", f"{path}.bn2", 1)
        if stride != 1 or cin != cout:
            x = _conv_bn(p, stats, x, f"{path}.downsample.0", f"{path}.downsample.1", stride)
        x = jax.nn.relu(h + x)
    logits = jnp.mean(x, axis=(2, 3)) @ p["fc.weight"].T + p["fc.bias"]
    return logits, stats


def _stats(model) -> dict:
    buffers = dict(model.named_buffers())
    return {
        path[: -len(".running_mean")]: (
            jnp.array(buffers[path].value),
            jnp.array(buffers[path[:-4] + "var"].value),
        )
        for path in buffers
        if path.endswith(".running_mean")
    }


def _torch_model(width: int):
    import torch.nn as tnn

    class Block(tnn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = tnn.BatchNorm2d(cout)
            self.conv2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = tnn.BatchNorm2d(cout)
            self.downsample = tnn.Identity()
            if stride != 1 or cin != cout:
                self.downsample = tnn.Sequential(
                    tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout)
                )

        def forward(self, x):
            h = self.bn1(self.conv1(x)).relu()
            return (self.bn2(self.conv2(h)) + self.downsample(x)).relu()

    return tnn.Sequential(
        tnn.Conv2d(3, width, 3, 1, 1, bias=False),
        tnn.BatchNorm2d(width),
        tnn.ReLU(),
        *[Block(cin, cout, stride) for _, cin, cout, stride in plan(width)],
        tnn.AdaptiveAvgPool2d(1),
        tnn.Flatten(),
        tnn.Linear(8 * width, CLASSES),
    )


def _torch_loss(model, x, y):
    import torch

    return torch.nn.functional.cross_entropy(model(x), y.long())


def variants(batch: int, size: int = 32, width: int = 64) -> dict[str, Variant]:
    x, y = C.classes(0, batch, (3, size, size), CLASSES)
    model = ResNet18(width, rngs=js.Rngs(params=0))
    params, stats = C.param_dict(model), _stats(model)

    def jax_loss(p, stats, x, y):
        logits, stats = forward(p, stats, x, width)
        return C.cross_entropy(logits, y), stats

    out = {
        "js": C.js_variant(
            js_step,
            model,
            js.optim.Adam(model.parameters(), lr=C.LR),
            jnp.asarray(x),
            jnp.asarray(y),
        ),
        "jax": C.jax_variant(jax_loss, params, (x, y), extra=stats),
    }
    old = ResNet18(width, rngs=js.Rngs(params=0))
    out["js (BatchNorm before)"] = batch_norm_before(
        C.js_variant(
            js.jit(js_step_fn),
            old,
            js.optim.Adam(old.parameters(), lr=C.LR),
            jnp.asarray(x),
            jnp.asarray(y),
        )
    )
    if C.HAVE_TORCH:
        C.torch_manual_seed()
        out["torch"] = C.torch_variant(_torch_model(width), _torch_loss, (x, y))
    return out
