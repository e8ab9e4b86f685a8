"""The machine's float32 matmul peak, measured: one large square matmul in jnp and in torch.

A workload's achieved FLOP/s is read against this number: a step at a small fraction of it is
bound by something else than arithmetic (dispatch, memory traffic, loop overhead).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from . import _common as C


def _best(run, repeats: int) -> float:
    run()  # compile / warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def peak(n: int = 2048, repeats: int = 5) -> dict:
    """GFLOP/s of an ``[n, n] @ [n, n]`` float32 matmul: best of ``repeats``, jnp and torch."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    flops = 2.0 * n**3
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    matmul = jax.jit(jnp.matmul)
    out = {
        "n": n,
        "jnp_gflops": flops / _best(lambda: matmul(ja, jb).block_until_ready(), repeats) / 1e9,
    }
    if C.HAVE_TORCH:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["torch_gflops"] = flops / _best(lambda: ta @ tb, repeats) / 1e9
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}
