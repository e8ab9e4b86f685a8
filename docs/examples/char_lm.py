"""A character-level language model trained by steps from token files: grain, TensorBoard, MFU.

    python docs/examples/char_lm.py [--fast] [--steps N] [--out runs/char_lm] [--bf16]
                                    [--workers N]

The text is generated (seeded sentences from small word lists), so nothing downloads. As in
nanoGPT, it is encoded once into token files, ``train.bin`` and ``val.bin`` (uint16 ids, no
header) in ``--out``, and training reads windows of them through a memory map
(``js.training.data.TokenWindows``): ``random=True`` makes every offset a window and
``process_batches`` draws them in a seeded order, endlessly (``.repeat()``: each pass a new
order, every offset once per pass), each process only its rows of a global batch. Validation
takes the non-overlapping windows of ``val.bin`` in order. The Trainer stops after ``--steps``
steps, places the next batches on the device while a step runs (``prefetch``), validates every
``val_every_n_steps``, logs every ``log_every_n_steps`` to a TensorBoard run (``tensorboard
--logdir runs/char_lm``) with throughput and MFU columns, and the optimizer averages the
gradients of 2 batches per update (``js.optim.accumulate``). ``--workers N`` reads the batches
in N grain worker processes: worth it when a row costs real work (decoding, tokenizing,
augmenting); slicing a memory map does not, so the default is 0 (each worker process starts
its own Python and imports js first). The model: token embedding + learned positions, one
pre-norm causal self-attention block, a linear head.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import js
import js.losses as losses
import js.nn as nn
import js.optim
from js.nn.attention import causal_mask
from js.training import Task, TensorBoardRun, Trainer, autocast, measure_peak_flops
from js.training.data import TokenWindows, process_batches

WORDS = ("the cat", "a dog", "my bird", "the fox", "one cow")
VERBS = ("sat on", "ran to", "looked at", "jumped over", "slept by")
PLACES = ("the mat", "a tree", "the house", "my bed", "the river")


def make_text(sentences: int, seed: int = 0) -> str:
    """``sentences`` seeded sentences like ``'the cat ran to a tree. '``."""
    rng = np.random.default_rng(seed)
    picks = [
        f"{WORDS[a]} {VERBS[b]} {PLACES[c]}. " for a, b, c in rng.integers(0, 5, (sentences, 3))
    ]
    return "".join(picks)


class CharLM(js.Module):
    def __init__(self, vocab: int, dim: int, context: int, heads: int = 4, *, rngs):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, rngs=rngs)
        self.position = js.Parameter(jnp.zeros((context, dim)))
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, rngs=rngs)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim, rngs=rngs), nn.Linear(4 * dim, dim, rngs=rngs)
        self.head = nn.Linear(dim, vocab, rngs=rngs)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.position.value[:T]  # [B, T, D]
        h = self.ln1(x)
        x = x + self.attn(h, h, h, mask=causal_mask(T))
        x = x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x))))
        return self.head(x)  # [B, T, V]


def _logits(model, x, compute_dtype):
    if compute_dtype is None:
        return model(x)
    with autocast(model, compute_dtype):  # tokens are ints: only the parameters are cast
        return model(x).astype(jnp.float32)


@js.jit(static_argnames=("compute_dtype",))
def lm_step(model, optimizer, batch, *, compute_dtype=None):
    """Next-character cross-entropy over every position of ``x [B, T]`` against ``y [B, T]``."""
    x, y = batch

    def loss_fn(model):
        logits = _logits(model, x, compute_dtype)  # [B, T, V]
        return losses.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    loss, grads = js.value_and_grad(loss_fn)(model)
    optimizer.step(grads)
    return {"loss": loss, "count": jnp.asarray(y.size, jnp.int32)}


@js.jit
def lm_eval_step(model, batch):
    x, y = batch
    logits = model(x)
    loss = losses.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return {"loss": loss, "count": jnp.asarray(y.size, jnp.int32)}


class LanguageModelTask(Task):
    def training_step(self, model, optimizer, rngs, batch):
        return lm_step(model, optimizer, batch, compute_dtype=self.compute_dtype)

    def validation_step(self, model, batch):
        return lm_eval_step(model, batch)


def write_tokens(text: str, vocab: list[str], path: Path) -> np.ndarray:
    """Encode ``text`` as character ids and write them to ``path`` as nanoGPT does."""
    ids = np.array([vocab.index(c) for c in text], dtype=np.uint16)
    ids.tofile(path)
    return ids


def train_batches(path: Path, context: int, batch: int, workers: int):
    """Endless batches ``(x [B, T], y [B, T])`` of random windows of the token file."""
    windows = TokenWindows(path, context, np.uint16, random=True)
    batches = process_batches(windows, batch, seed=1).repeat()  # a new order every pass
    if workers == 0:
        return batches
    import absl.flags  # grain's worker processes read absl flags: this script parses none
    import grain

    absl.flags.FLAGS.mark_as_parsed()
    options = grain.MultiprocessingOptions(num_workers=workers)
    return batches.to_iter_dataset().mp_prefetch(options)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="a few steps, a tiny model")
    parser.add_argument("--steps", type=int, default=None, help="training steps (600)")
    parser.add_argument("--out", type=Path, default=Path("runs/char_lm"))
    parser.add_argument("--bf16", action="store_true", help="bf16 compute, float32 weights")
    parser.add_argument("--workers", type=int, default=0, help="grain worker processes (0)")
    args = parser.parse_args(argv)
    steps = args.steps or (24 if args.fast else 600)
    dim, context = (16, 16) if args.fast else (64, 32)
    text = make_text(400)
    vocab = sorted(set(text))
    args.out.mkdir(parents=True, exist_ok=True)
    split = len(text) * 9 // 10
    train = write_tokens(text[:split], vocab, args.out / "train.bin")
    write_tokens(text[split:], vocab, args.out / "val.bin")
    val = process_batches(TokenWindows(args.out / "val.bin", context), 32, shuffle=False)

    model = CharLM(len(vocab), dim, context, rngs=js.Rngs(params=0))
    optimizer = js.optim.accumulate(js.optim.Adam(model.parameters(), lr=3e-3), every=2)
    task = LanguageModelTask(model, optimizer, compute_dtype=jnp.bfloat16 if args.bf16 else None)
    trainer = Trainer(
        max_steps=steps,
        val_every_n_steps=max(steps // 4, 1),
        log_every_n_steps=max(steps // 12, 1),
        limit_val_batches=4,
        run=TensorBoardRun(args.out),
        prefetch=2,  # the next 2 batches placed on the device while a step runs
        peak_flops=measure_peak_flops(512 if args.fast else None),  # perf/mfu against it
        tokens_per_sample=1,  # perf/tokens_per_s: the steps' count is already tokens (B * T)
    )
    train_data = train_batches(args.out / "train.bin", context, 32, args.workers)
    history = trainer.fit(task, train_data, val)

    counts = np.bincount(train, minlength=len(vocab)) + 1
    unigram = float(-np.sum(counts / counts.sum() * np.log(counts / counts.sum())))
    last = [row for row in history if "val/loss" in row][-1]
    print(
        f"val loss {last['val/loss']:.4f} after {steps} steps ({int(optimizer.step_count)} "
        f"updates) vs unigram baseline {unigram:.4f}"
    )
    # the last log window's rates (an epoch row's span the whole run, compilation included)
    perf = [row for row in history if "perf/mfu" in row and "time/epoch_s" not in row][-1]
    print(
        f"{perf['perf/tokens_per_s']:.0f} tokens/s, MFU {perf['perf/mfu']:.4f} of a measured "
        f"matmul peak ({perf['perf/flops_per_step'] / 1e6:.1f} MFLOP per step)"
    )
    print(f"device-to-host reads (trainer.transfers): {trainer.transfers}")
    print(f"tensorboard: {args.out}")
    return {"val_loss": last["val/loss"], "unigram": unigram, "history": history}


if __name__ == "__main__":
    main()
