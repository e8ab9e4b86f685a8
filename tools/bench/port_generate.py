"""Sampling from the nanoGPT port: its eager ``generate`` as written, against the two fast
paths docs/porting.md shows, and nanoGPT itself under torch.

Usage, from the repository root, with the bench environment's Python::

    python -m tools.bench.port_generate --cores 2         # nanoGPT's baby GPT, 32 new tokens
    python -m tools.bench.port_generate --smoke           # 2 layers, width 32, 4 new tokens

The model is nanoGPT's character-level Shakespeare configuration (6 layers, 6 heads, width
384, context 256, a 65-symbol vocabulary; about 10.7M parameters), random weights, evaluation
mode; the prompt is 8 random ids, batch 1, and every path samples ``--new`` tokens with
nanoGPT's ``sample.py`` settings (temperature 0.8, top-k 200). Four paths, each in a fresh
process (so that no path finds another's compiled programs), all on the same cores
(``--cores N`` pins this process and its children; torch gets one thread per core):

- ``torch``: nanoGPT's ``model.py`` and its ``generate`` (``packages/js-models/tests/
  nanogpt_torch.py``);
- ``eager``: the port's ``generate``, as written (``nanogpt_port.py``): every operation runs
  eagerly, and is compiled again for each new sequence length;
- ``fixed_buffer``: the same loop as one ``js.jit`` step over a ``[1, L]`` buffer, ``L`` the
  next of 16, 32, 64, ... (``nanogpt_fast.fixed_buffer_generate``);
- ``gpt2``: the port's weights in ``js.models.GPT2LMHeadModel`` (``nanogpt_fast.to_gpt2``, not
  timed), sampled by ``js.models.generate`` (prefill, then a cached decode loop).

Each child times its first call (compilation included) and then ``--repeats`` calls of the
same shapes (median): per token = that median / ``--new``. Prints a markdown table with each
path's times and ratios to torch; ``--json PATH`` writes the measurements.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.bench import _cores

ROOT = Path(__file__).resolve().parents[2]
PATHS = ("torch", "eager", "fixed_buffer", "gpt2")
BABY = dict(block_size=256, vocab_size=65, n_layer=6, n_head=6, n_embd=384, dropout=0.0)
SMOKE = dict(block_size=16, vocab_size=65, n_layer=2, n_head=2, n_embd=32, dropout=0.0)

_CHILD = """
import json, statistics, sys, time
path, config = sys.argv[1], json.loads(sys.argv[2])
new, repeats = int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, sys.argv[5] + "/packages/js-models/tests")
sys.path.insert(0, sys.argv[5])
import numpy as np
prompt = np.random.RandomState(0).randint(0, config["vocab_size"], (1, 8))
if path == "torch":
    import torch
    from tools.bench import _cores
    _cores.match_torch()
    import nanogpt_torch as nanogpt
    torch.manual_seed(0)
    model = nanogpt.GPT(nanogpt.GPTConfig(**config)).eval()
    ids = torch.from_numpy(prompt)
    def run():
        return model.generate(ids, new, temperature=0.8, top_k=200).numpy()
else:
    import jax.numpy as jnp
    import js, js.models
    import nanogpt_port as nanogpt
    from nanogpt_fast import fixed_buffer_generate, to_gpt2
    model = nanogpt.GPT(nanogpt.GPTConfig(**config), rngs=js.Rngs(params=0)).eval()
    rngs = js.Rngs(sample=0)
    if path == "eager":
        def run():
            return np.asarray(model.generate(jnp.asarray(prompt), new, 0.8, 200, rngs=rngs))
    elif path == "fixed_buffer":
        def run():
            return fixed_buffer_generate(model, prompt, new, 0.8, 200, rngs=rngs)
    else:
        gpt2 = to_gpt2(model)
        def run():
            return np.asarray(js.models.generate(
                gpt2, prompt, max_new_tokens=new, do_sample=True, temperature=0.8, top_k=200,
                eos_token_id=[], rngs=rngs))
t0 = time.perf_counter()
out = run()
first = time.perf_counter() - t0
assert out.shape == (1, 8 + new), out.shape
times = []
for _ in range(repeats):
    t0 = time.perf_counter()
    run()
    times.append(time.perf_counter() - t0)
print(json.dumps({"first_s": first, "warm_s": statistics.median(times)}))
"""


def _measure(path: str, config: dict, new: int, repeats: int) -> dict:
    argv = (path, json.dumps(config), str(new), str(repeats), str(ROOT))
    return _cores.fresh_process(f"port_generate ({path})", _CHILD, *argv)


def table(runs: dict[str, dict], new: int) -> str:
    """The markdown table of ``runs`` (path -> first_s, warm_s), ratios to torch's."""
    torch = runs["torch"]
    lines = [
        "| path | first call s | per token ms (warm) | first call / torch | per token / torch |",
        "|---|---:|---:|---:|---:|",
    ]
    for path, run in runs.items():
        lines.append(
            f"| {path} | {run['first_s']:.2f} | {1e3 * run['warm_s'] / new:.2f} | "
            f"{run['first_s'] / torch['first_s']:.1f}x | {run['warm_s'] / torch['warm_s']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="port_generate", description=__doc__.split("\n")[0])
    parser.add_argument("--new", type=int, default=None, help="new tokens (default 32; smoke 4)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cores", type=int, default=None, help="pin to the first N cores")
    parser.add_argument("--smoke", action="store_true", help="2 layers, width 32")
    parser.add_argument("--only", nargs="+", choices=PATHS, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write every measurement")
    args = parser.parse_args(argv)
    cores = _cores.pin(sys.argv[1:] if argv is None else argv)
    config = SMOKE if args.smoke else BABY
    new = args.new or (4 if args.smoke else 32)
    paths = ["torch", *[p for p in args.only or PATHS if p != "torch"]]
    runs = {path: _measure(path, config, new, args.repeats) for path in paths}
    print(f"nanoGPT port, sampling {new} tokens after 8 ({config}), cores {cores}\n")
    print(table(runs, new))
    if args.json:
        args.json.write_text(json.dumps({"config": config, "new": new, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
