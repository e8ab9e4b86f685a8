"""Time per epoch of ``Trainer.fit`` against a hand-written ``jax.jit`` loop, in one run.

    python docs/examples/trainer_overhead.py [--fast]

Both train the digits CNN of ``digits.py`` with Adam on the same shuffled batches for the same
number of epochs, without validation. The hand-written loop splits the model once
(``nnx.split``), compiles one pure step with donated state, and sums the metrics on the
device; Trainer goes through ``Task``, ``js.jit`` (state written back into the objects after
each call) and its on-device totals. The first epoch (compilation) is excluded; the report
gives the median epoch time of each and their ratio.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
from flax import nnx

import js
import js.losses as losses
import js.optim
from js.training import ArrayLoader, Task, Trainer

sys.path.insert(0, str(Path(__file__).parent))
from digits import DigitsCNN, split_digits  # noqa: E402


def handwritten_epochs(train, epochs: int) -> list[float]:
    """Seconds per epoch of a plain jax.jit loop over split state."""
    model, rngs = DigitsCNN(rngs=js.Rngs(params=0)), js.Rngs(dropout=1)
    graphdef, params, rest = nnx.split((model, rngs), nnx.Param, ...)
    tx = optax.adam(2e-3)
    opt_state = tx.init(params)

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2, 3))
    def step(params, rest, opt_state, totals, x, y):
        def loss_fn(params, rest):
            model, rngs = nnx.merge(graphdef, params, rest, copy=True)
            logits = model(x, rngs=rngs)  # [B, 10]
            new_rest = nnx.split((model, rngs), nnx.Param, ...)[2]
            return losses.cross_entropy(logits, y), (logits, new_rest)

        (loss, (logits, rest)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, rest)
        updates, opt_state = tx.update(grads, opt_state, params)
        correct = jnp.sum(jnp.argmax(logits, -1) == y)
        totals = totals + jnp.stack([loss * y.shape[0], y.shape[0], correct])
        return optax.apply_updates(params, updates), rest, opt_state, totals

    loader, times = ArrayLoader(*train, batch_size=64, shuffle=True, seed=0), []
    for _ in range(epochs):
        started, totals = time.perf_counter(), jnp.zeros(3)
        for x, y in loader:
            params, rest, opt_state, totals = step(params, rest, opt_state, totals, x, y)
        jax.device_get(totals)  # the epoch's one read, as Trainer does
        times.append(time.perf_counter() - started)
    return times


def trainer_epochs(train, epochs: int) -> list[float]:
    model = DigitsCNN(rngs=js.Rngs(params=0))
    task = Task(model, js.optim.Adam(model.parameters(), lr=2e-3), rngs=js.Rngs(dropout=1))
    history = Trainer(epochs, verbose=False).fit(
        task, ArrayLoader(*train, batch_size=64, shuffle=True, seed=0))
    return [h["time/epoch_s"] for h in history]


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="3 epochs instead of 8")
    parser.add_argument("--no-cache", action="store_true",
                        help="compile every program afresh (no persistent compilation cache)")
    args = parser.parse_args(argv)
    if not args.no_cache:
        js.enable_compilation_cache()  # the next run loads its programs from ~/.cache/js/jax
    epochs = 3 if args.fast else 8
    train, _, _ = split_digits()
    plain = statistics.median(handwritten_epochs(train, epochs)[1:])
    ours = statistics.median(trainer_epochs(train, epochs)[1:])
    print(f"hand-written jax.jit loop: {plain * 1e3:.1f} ms/epoch")
    print(f"Trainer.fit:               {ours * 1e3:.1f} ms/epoch")
    print(f"ratio Trainer / hand-written: {ours / plain:.2f}")
    return ours / plain


if __name__ == "__main__":
    main()
