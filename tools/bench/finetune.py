"""Fine-tuning figures: what freezing, LoRA and rematerialisation cost and save, side by side.

Usage, from the repository root, with the bench environment's Python (js-models installed)::

    python -m tools.bench.finetune                      # every section, 2 rounds
    python -m tools.bench.finetune --cores 2 --json finetune.json
    python -m tools.bench.finetune --smoke              # tiny shapes, one round

Sections, each in this one process (``--cores N`` pins it to N cores first):

- ``frozen``: the bench's small GPT (``_gpt.GPT``, 4 layers, width 128, context 128, batch 16,
  AdamW) trained in full against the same model with its backbone frozen (token and position
  embeddings and every block: ``requires_grad_(False)``; the final LayerNorm and the head
  train). Per variant: the compiled step's FLOPs (``cost_analysis()``), its temporary memory
  (``memory_analysis()``), the optimizer's state bytes, and the median step time over
  ``--steps`` steps, the variants alternating within each of ``--rounds`` rounds. The same for
  the bench's CNN (``_cnn.CNN`` on 1x28x28, batch 64) with its convolutions and batch norms
  frozen (the classifier trains).
- ``lora``: AdamW's state bytes for GPT-2 124M (``GPT2Config()`` shapes, random weights) in
  full fine-tuning against LoRA r=8 on ``c_attn`` (PEFT's default target for GPT-2), counted
  from the optimizers' ``state_dict`` of a real model.
- ``remat``: a 12-block transformer stack (``ScannedStack``, width ``--width``, sequence 128,
  batch 8): temporary memory and step time with ``remat=True`` against without.
- ``compile``: the seconds to lower and compile a gradient of 12 and of 48 transformer blocks
  (width 64), unrolled against ``ScannedStack``.

Ratios (frozen / full, remat / plain) are what to read: both variants run in the same process
and round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from . import _cores


def _cost(compiled) -> tuple[float, int]:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return float(cost["flops"]), int(compiled.memory_analysis().temp_size_in_bytes)


def _state_bytes(optimizer) -> int:
    return sum(a.nbytes for k, a in optimizer.state_dict().items() if k != "step_count")


def _time_steps(step, args, steps: int) -> float:
    """Median seconds per step over ``steps`` calls, each waited for."""
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step(*args).block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _compare(build, freeze, step_fn, rounds: int, steps: int) -> dict:
    """Full against frozen: ``build() -> (model, *batch)``, ``freeze(model)`` freezes the
    backbone, ``step_fn(model, optimizer, *batch)`` one training step."""
    import js
    import js.optim

    variants = {}
    for name in ("full", "frozen"):
        model, *batch = build()
        if name == "frozen":
            freeze(model)
        optimizer = js.optim.AdamW(model.parameters(), lr=1e-3)
        step = js.jit(step_fn)
        flops, temp = _cost(step.lower(model, optimizer, *batch).compile())
        args = (model, optimizer, *batch)
        _time_steps(step, args, 3)  # compile and warm up
        variants[name] = {
            "flops": flops,
            "temp_bytes": temp,
            "optimizer_state_bytes": _state_bytes(optimizer),
            "trainable": sum(p.value.size for p in model.parameters() if p.requires_grad),
            "times": [],
            "args": args,
            "step": step,
        }
    for r in range(rounds):
        order = ("full", "frozen") if r % 2 == 0 else ("frozen", "full")
        for name in order:
            v = variants[name]
            v["times"].append(_time_steps(v["step"], v["args"], steps))
    out = {}
    for name, v in variants.items():
        out[name] = {k: v[k] for k in ("flops", "temp_bytes", "optimizer_state_bytes", "trainable")}
        out[name]["step_s"] = statistics.median(v["times"])
    out["ratio"] = {
        "flops": out["frozen"]["flops"] / out["full"]["flops"],
        "step_time": out["frozen"]["step_s"] / out["full"]["step_s"],
        "optimizer_state_bytes": out["frozen"]["optimizer_state_bytes"]
        / out["full"]["optimizer_state_bytes"],
    }
    return out


def frozen(rounds: int, steps: int, smoke: bool) -> dict:
    import jax
    import numpy as np

    import js
    from js.nn.attention import causal_mask

    from . import _cnn, _gpt

    layers, dim, context, batch = (1, 32, 16, 4) if smoke else (4, 128, 128, 16)

    def build_gpt():
        rng = np.random.default_rng(0)
        model = _gpt.GPT(layers, 4, dim, context, rngs=js.Rngs(params=0))
        x = jax.numpy.asarray(rng.integers(0, _gpt.VOCAB, (batch, context)), jax.numpy.int32)
        y = jax.numpy.asarray(rng.integers(0, _gpt.VOCAB, (batch, context)), jax.numpy.int32)
        return model, x, y, causal_mask(context)

    def freeze_gpt(model):
        for part in (model.tok, model.pos, model.blocks):
            part.requires_grad_(False)

    size, cbatch = (8, 8) if smoke else (28, 64)

    def build_cnn():
        rng = np.random.default_rng(0)
        model = _cnn.CNN(32, 64, size, rngs=js.Rngs(params=0))
        x = jax.numpy.asarray(rng.normal(size=(cbatch, 1, size, size)), jax.numpy.float32)
        y = jax.numpy.asarray(rng.integers(0, 10, cbatch), jax.numpy.int32)
        return model, js.Rngs(dropout=1), x, y

    def freeze_cnn(model):
        for part in (model.conv1, model.bn1, model.conv2, model.bn2):
            part.requires_grad_(False)

    return {
        "gpt": _compare(build_gpt, freeze_gpt, _gpt.js_step_fn, rounds, steps),
        "cnn": _compare(build_cnn, freeze_cnn, _cnn.js_step_fn, rounds, steps),
    }


def lora(smoke: bool) -> dict:
    import js
    import js.optim
    from js.models import GPT2Config, GPT2LMHeadModel
    from js.nn import lora as lora_

    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100) if smoke else GPT2Config()
    out = {}
    for name in ("full", "lora_r8"):
        model = GPT2LMHeadModel(config, rngs=js.Rngs(params=0))
        if name == "lora_r8":
            lora_.inject(model, targets=("*.c_attn",), r=8, alpha=16, rngs=js.Rngs(params=1))
        optimizer = js.optim.AdamW(model.parameters(), lr=1e-4)
        out[name] = {
            "trainable": sum(p.value.size for p in model.parameters() if p.requires_grad),
            "optimizer_state_bytes": _state_bytes(optimizer),
        }
        del model, optimizer
    out["ratio"] = out["lora_r8"]["optimizer_state_bytes"] / out["full"]["optimizer_state_bytes"]
    return out


def remat(rounds: int, steps: int, width: int, smoke: bool) -> dict:
    import jax.numpy as jnp
    import numpy as np

    import js
    from js import nn
    from js._checks import flatten_state

    blocks, seq, batch = (2, 8, 2) if smoke else (12, 128, 8)
    width = 32 if smoke else width

    def build(with_remat: bool):
        layers = nn.ModuleList(
            [
                nn.TransformerEncoderLayer(
                    width, 4, 4 * width, dropout=0.0, batch_first=True, rngs=js.Rngs(params=i)
                )
                for i in range(blocks)
            ]
        )
        return nn.ScannedStack(layers, remat=with_remat)

    def loss_fn(model, x):
        return jnp.mean(model(x) ** 2)

    def step_fn(model, x):
        loss, grads = js.value_and_grad(loss_fn)(model, x)
        flat = flatten_state(grads)
        for path, param in model.named_parameters():  # plain SGD: the step is the model's
            param.value = param.value - 1e-3 * flat[path]
        return loss

    x = jnp.asarray(np.random.default_rng(0).normal(size=(batch, seq, width)), jnp.float32)
    variants = {}
    for name in ("plain", "remat"):
        model = build(name == "remat")
        step = js.jit(step_fn)
        flops, temp = _cost(step.lower(model, x).compile())
        _time_steps(step, (model, x), 2)
        variants[name] = {"temp_bytes": temp, "flops": flops, "step": step, "model": model}
        variants[name]["times"] = []
    for r in range(rounds):
        for name in ("plain", "remat") if r % 2 == 0 else ("remat", "plain"):
            v = variants[name]
            v["times"].append(_time_steps(v["step"], (v["model"], x), steps))
    out = {
        name: {"temp_bytes": v["temp_bytes"], "flops": v["flops"]}
        | {"step_s": statistics.median(v["times"])}
        for name, v in variants.items()
    }
    out["ratio"] = {
        "temp_bytes": out["remat"]["temp_bytes"] / out["plain"]["temp_bytes"],
        "step_time": out["remat"]["step_s"] / out["plain"]["step_s"],
        "flops": out["remat"]["flops"] / out["plain"]["flops"],
    }
    return out


def compile_times(depths: tuple[int, ...], width: int, smoke: bool) -> dict:
    """Seconds to lower and compile one ``value_and_grad`` step of ``depth`` transformer blocks,
    unrolled (a Python loop over a ModuleList) against scanned (``ScannedStack``), each in a
    fresh ``js.jit`` with the persistent compilation cache off."""
    import jax.numpy as jnp

    import js
    from js import nn

    width = 32 if smoke else width
    x = jnp.ones((2, 16, width))

    class Unrolled(js.Module):
        def __init__(self, blocks):
            super().__init__()
            self.blocks = nn.ModuleList(blocks)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    def grad_of(model):
        return js.grad(lambda m, x: jnp.mean(m(x) ** 2))(model, x)

    out = {}
    for depth in depths:

        def blocks(depth=depth):
            return [
                nn.TransformerEncoderLayer(
                    width, 4, 4 * width, dropout=0.0, batch_first=True, rngs=js.Rngs(params=i)
                )
                for i in range(depth)
            ]

        row = {}
        for name, model in (
            ("unrolled", Unrolled(blocks())),
            ("scanned", nn.ScannedStack(blocks())),
        ):
            start = time.perf_counter()
            js.jit(grad_of).lower(model).compile()
            row[name + "_s"] = time.perf_counter() - start
        row["ratio"] = row["scanned_s"] / row["unrolled_s"]
        out[str(depth)] = row
    return out


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    cores = _cores.pin(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--sections", default="frozen,lora,remat,compile")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.steps = 1, 2
    results: dict = {"cores": len(cores)}
    sections = args.sections.split(",")
    if "frozen" in sections:
        results["frozen"] = frozen(args.rounds, args.steps, args.smoke)
    if "lora" in sections:
        results["lora"] = lora(args.smoke)
    if "remat" in sections:
        results["remat"] = remat(args.rounds, args.steps, args.width, args.smoke)
    if "compile" in sections:
        depths = (2, 4) if args.smoke else (12, 48)
        results["compile"] = compile_times(depths, 64, args.smoke)
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return results


if __name__ == "__main__":
    main()
