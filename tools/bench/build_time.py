"""Building a model from scratch: nanoGPT's 124M GPT-2 in js against the same model in torch.

Usage, from the repository root, with the bench environment's Python::

    python -m tools.bench.build_time                   # 124M (nanoGPT's config), 3 rounds
    python -m tools.bench.build_time --cores 2 --rounds 5
    python -m tools.bench.build_time --smoke           # 2 layers, width 64: seconds

Both sides are the same network written the way nanoGPT writes it (our own code, not
nanoGPT's): token and position embeddings, 12 pre-norm blocks (``c_attn``, ``c_proj``,
``c_fc``, ``c_proj``), a final LayerNorm and a head tied to the token embedding (vocabulary
50304, context 1024, width 768); the layers are built with their default initialisation, then
``apply`` re-initialises every Linear and Embedding weight with ``normal_(0, 0.02)``, every bias
with zeros and the residual projections with ``0.02 / sqrt(2 * n_layer)``, as nanoGPT does. The
clock runs from the constructor's call until every array is ready on its device (js: every
Variable's array, ``block_until_ready``). Imports are timed apart.

Each measurement is a fresh Python process (the order alternating between rounds); the parent
imports neither jax nor torch. Both run on the same cores: ``--cores N`` pins this process
(children inherit it; XLA's pool and js's initialisation threads size themselves to it) and
torch gets one thread per core (``_cores.match_torch``). Prints a markdown table of medians
and the median over rounds of the js/torch ratio; ``--json PATH`` writes every measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from tools.bench import _cores

ROOT = Path(__file__).resolve().parents[2]

FULL = {"n_layer": 12, "n_embd": 768, "vocab": 50304, "context": 1024}
SMOKE = {"n_layer": 2, "n_embd": 64, "vocab": 256, "context": 32}

_JS = """
import json, math, sys, time
config = json.loads(sys.argv[1])
t0 = time.perf_counter()
import jax
import js
import js.nn as nn
t1 = time.perf_counter()
L, D, V, T = config["n_layer"], config["n_embd"], config["vocab"], config["context"]


class Block(js.Module):
    def __init__(self, *, rngs):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D)
        self.c_attn = nn.Linear(D, 3 * D, rngs=rngs)
        self.attn_proj = nn.Linear(D, D, rngs=rngs)
        self.ln_2 = nn.LayerNorm(D)
        self.c_fc = nn.Linear(D, 4 * D, rngs=rngs)
        self.mlp_proj = nn.Linear(4 * D, D, rngs=rngs)


class GPT(js.Module):
    def __init__(self, *, rngs):
        super().__init__()
        self.wte = nn.Embedding(V, D, rngs=rngs)
        self.wpe = nn.Embedding(T, D, rngs=rngs)
        self.h = nn.ModuleList([Block(rngs=rngs) for _ in range(L)])
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False, rngs=rngs)
        self.wte.weight = self.lm_head.weight  # tied, as nanoGPT
        self.rngs = rngs
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L), rngs=rngs)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, 0.02, rngs=self.rngs)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, 0.02, rngs=self.rngs)


jax.devices()  # XLA's CPU backend starts on first use: not part of the build
t2 = time.perf_counter()
model = GPT(rngs=js.Rngs(params=0))
jax.block_until_ready([p.value for p in model.parameters()])
t3 = time.perf_counter()
count = sum(p.value.size for p in model.parameters())
print(json.dumps({"imports": t1 - t0, "build": t3 - t2, "parameters": int(count)}))
"""

_TORCH = """
import json, math, sys, time
config = json.loads(sys.argv[1])
t0 = time.perf_counter()
import torch
import torch.nn as nn
sys.path.insert(0, sys.argv[2])
from tools.bench import _cores
_cores.match_torch()
t1 = time.perf_counter()
L, D, V, T = config["n_layer"], config["n_embd"], config["vocab"], config["context"]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D)
        self.c_attn = nn.Linear(D, 3 * D)
        self.attn_proj = nn.Linear(D, D)
        self.ln_2 = nn.LayerNorm(D)
        self.c_fc = nn.Linear(D, 4 * D)
        self.mlp_proj = nn.Linear(4 * D, D)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as nanoGPT
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, 0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, 0.02)


torch.manual_seed(0)
t2 = time.perf_counter()
model = GPT()
t3 = time.perf_counter()
count = sum(p.numel() for p in model.parameters())
print(json.dumps({"imports": t1 - t0, "build": t3 - t2, "parameters": int(count)}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build_time", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=None, help="pin to the first N cores")
    parser.add_argument("--smoke", action="store_true", help="a 2-layer width-64 model")
    parser.add_argument("--json", type=Path, default=None, help="write every measurement")
    args = parser.parse_args(argv)
    cores = _cores.pin(sys.argv[1:] if argv is None else argv)
    config = SMOKE if args.smoke else FULL
    runs: dict[str, list[dict]] = {"js": [], "torch": []}
    for round_ in range(args.rounds):
        order = ["js", "torch"] if round_ % 2 == 0 else ["torch", "js"]
        for name in order:
            script = _JS if name == "js" else _TORCH
            runs[name].append(
                _cores.fresh_process("build_time", script, json.dumps(config), str(ROOT))
            )
    ratios = [j["build"] / t["build"] for j, t in zip(runs["js"], runs["torch"], strict=True)]
    print(f"Building nanoGPT's GPT ({config}), {args.rounds} rounds, cores {cores}\n")
    print("| | parameters | imports (s) | build (s) |\n| --- | ---: | ---: | ---: |")
    for name, measured in runs.items():
        imports = statistics.median(m["imports"] for m in measured)
        build = statistics.median(m["build"] for m in measured)
        print(f"| {name} | {measured[0]['parameters']:,} | {imports:.2f} | {build:.2f} |")
    print(
        f"\njs / torch build time, median of the rounds' ratios: {statistics.median(ratios):.2f}x"
    )
    if args.json:
        args.json.write_text(json.dumps({"config": config, "runs": runs, "ratios": ratios}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
