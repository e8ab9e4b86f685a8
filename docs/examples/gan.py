"""A GAN on a 2-D mixture of 8 Gaussians, with the two compiled GAN steps in an explicit loop.

    python docs/examples/gan.py [--fast]

``steps.discriminator_step`` and ``steps.generator_step`` each update only their own module
with their own optimizer. Two models and two optimizers alternate, so this is an explicit
loop rather than Trainer (whose Task holds one model and one optimizer). Losses are summed on
the device and read once per report.
"""

from __future__ import annotations

import argparse

import jax
import numpy as np

import js
import js.nn as nn
import js.optim
from js.training import ArrayLoader, steps

LATENT = 4


def mixture(n: int, seed: int = 0) -> np.ndarray:
    """``n`` points [n, 2] around 8 centres on a circle of radius 2 (std 0.05)."""
    rng = np.random.default_rng(seed)
    angles = 2 * np.pi * rng.integers(0, 8, n) / 8
    centres = 2 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    return (centres + 0.05 * rng.normal(size=(n, 2))).astype(np.float32)


def mlp(sizes, rngs):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers += [nn.Linear(a, b, rngs=rngs)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
    return nn.Sequential(*layers)


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="a short smoke run")
    parser.add_argument("--no-cache", action="store_true",
                        help="compile every program afresh (no persistent compilation cache)")
    args = parser.parse_args(argv)
    if not args.no_cache:
        js.enable_compilation_cache()  # the next run loads its programs from ~/.cache/js/jax
    rngs = js.Rngs(params=0, noise=1)
    generator = mlp([LATENT, 64, 64, 2], rngs)  # z [B, 4] -> point [B, 2]
    discriminator = mlp([2, 64, 64, 1], rngs)  # point [B, 2] -> logit [B, 1]
    g_opt = js.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.999))
    d_opt = js.optim.Adam(discriminator.parameters(), lr=1e-3, betas=(0.5, 0.999))
    loader = ArrayLoader(mixture(4096), batch_size=256, shuffle=True, drop_last=True)
    for epoch in range(2 if args.fast else 40):
        d_total = g_total = 0.0  # device arrays after the first step: no per-step reads
        for batch in loader:
            d_total += steps.discriminator_step(discriminator, generator, d_opt, batch, rngs,
                                                latent_dim=LATENT)["loss"]
            g_total += steps.generator_step(generator, discriminator, g_opt, batch, rngs,
                                            latent_dim=LATENT)["loss"]
        if epoch % 10 == 0 or args.fast:
            d_loss, g_loss = jax.device_get((d_total, g_total))
            print(f"epoch {epoch}  d/loss {d_loss / len(loader):.4f}  "
                  f"g/loss {g_loss / len(loader):.4f}")
    samples = np.asarray(generator(jax.random.normal(rngs.next("noise"), (2000, LATENT))))
    radius = np.linalg.norm(samples, axis=1)
    near = float(np.mean(np.abs(radius - 2) < 0.5))
    print(f"generated points within 0.5 of the ring: {near:.2f}; mean radius "
          f"{radius.mean():.2f} (target 2.00)")
    return near


if __name__ == "__main__":
    main()
