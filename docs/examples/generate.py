"""Train a tiny GPT-2 on characters, then generate text: greedy, sampled, and streamed.

    python docs/examples/generate.py [--fast] [--steps N]

The text is char_lm.py's (seeded sentences from small word lists, nothing downloads); the model
is js.models' GPT-2 with a 2-layer, width-64 config, trained for ``--steps`` steps on random
48-character windows. Then ``model.generate`` continues a left-padded batch of prompts greedily (one
compiled prefill, one compiled decode loop with a key-value cache), samples with temperature
and top-k from a seeded ``js.Rngs``, and ``js.models.stream`` prints a continuation chunk by
chunk as it is made.
"""

from __future__ import annotations

import argparse
import time

import jax.numpy as jnp
import numpy as np
from char_lm import make_text  # the sibling example's text

import js
import js.models
import js.optim
from js.losses import cross_entropy
from js.models import GPT2Config, GPT2LMHeadModel


CONTEXT, NEW = 48, 36  # trained window; new tokens per prompt (prompt + NEW <= CONTEXT)


def windows(ids: np.ndarray, context: int, batch: int, seed: int):
    """Endless batches ``(x [B, T], y [B, T])`` of random windows, ``y`` shifted by one."""
    rng = np.random.default_rng(seed)
    while True:
        start = rng.integers(0, len(ids) - context - 1, batch)
        index = start[:, None] + np.arange(context)  # [B, T]
        yield ids[index], ids[index + 1]


def loss_fn(model, x, y):
    logits = model(x)  # [B, T, V]
    return cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@js.jit
def train_step(model, optimizer, x, y):
    loss, grads = js.value_and_grad(loss_fn)(model, x, y)
    optimizer.step(grads)
    return loss


def encode(prompts: list[str], vocab: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids ``[B, L]`` left-padded to the longest prompt, and the attention mask."""
    width = max(map(len, prompts))
    ids = np.zeros((len(prompts), width), np.int32)
    mask = np.zeros((len(prompts), width), np.int32)
    for row, text in enumerate(prompts):
        ids[row, width - len(text) :] = [vocab.index(c) for c in text]
        mask[row, width - len(text) :] = 1
    return ids, mask


def decode(ids, vocab: list[str]) -> str:
    return "".join(vocab[i] for i in np.asarray(ids).tolist())


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="fewer training steps")
    parser.add_argument("--steps", type=int, default=None, help="training steps (500)")
    args = parser.parse_args(argv)
    steps = args.steps or (150 if args.fast else 500)
    text = make_text(400)
    vocab = sorted(set(text))
    ids = np.array([vocab.index(c) for c in text], np.int32)

    config = GPT2Config(
        vocab_size=len(vocab),
        n_positions=CONTEXT,
        n_embd=64,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        eos_token_id=None,  # no end token: every row runs to max_new_tokens
        bos_token_id=None,
    )
    model = GPT2LMHeadModel(config, rngs=js.Rngs(params=0))
    optimizer = js.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    batches = windows(ids, CONTEXT, 32, seed=1)
    losses = [float(train_step(model, optimizer, *next(batches))) for _ in range(steps)]
    print(f"trained {steps} steps: loss {losses[0]:.3f} -> {np.mean(losses[-10:]):.3f}")

    model.eval()
    prompts = ["the cat", "a dog ran", "one "]
    prompt_ids, mask = encode(prompts, vocab)
    start = time.perf_counter()
    greedy = model.generate(prompt_ids, attention_mask=mask, max_new_tokens=NEW)
    first_s = time.perf_counter() - start  # compiles the prefill and the decode loop
    start = time.perf_counter()
    greedy = model.generate(prompt_ids, attention_mask=mask, max_new_tokens=NEW)
    warm_s = time.perf_counter() - start  # the same buckets: nothing compiles
    width = prompt_ids.shape[1]
    for row, prompt in enumerate(prompts):
        print(f"greedy  {prompt!r:12} -> {decode(greedy[row, width:], vocab)!r}")
    tokens = NEW * len(prompts)
    print(f"first call {first_s:.2f} s (compiling); again {warm_s * 1e3:.1f} ms, "
          f"{tokens / warm_s:.0f} tokens/s")

    sampled = model.generate(
        prompt_ids,
        attention_mask=mask,
        max_new_tokens=NEW,
        do_sample=True,
        temperature=0.8,
        top_k=5,
        rngs=js.Rngs(sample=0),
    )
    for row, prompt in enumerate(prompts):
        print(f"sampled {prompt!r:12} -> {decode(sampled[row, width:], vocab)!r}")

    print("streamed 'the fox' -> ", end="", flush=True)
    chunks = []
    one_ids, one_mask = encode(["the fox"], vocab)
    for part in js.models.stream(model, one_ids, attention_mask=one_mask, max_new_tokens=NEW,
                                 chunk=8):
        chunks.append(part)
        print(decode(part[0], vocab), end="|", flush=True)
    print()
    streamed = np.concatenate(chunks, axis=1)
    same = np.array_equal(streamed, np.asarray(model.generate(one_ids, max_new_tokens=NEW))[:, 7:])
    print(f"stream equals generate: {same}")
    return {"losses": losses, "greedy": np.asarray(greedy), "streamed_equal": same}


if __name__ == "__main__":
    main()
