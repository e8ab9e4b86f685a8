"""Where ``js.jit``'s compile time goes, next to the hand-written ``jax.jit`` step.

``python -m tools.bench._compile [REPEATS [WORKLOAD]]`` splits the first call of each into:
js's host-side flattening of the objects (``lay_out``), JAX tracing (the Python of the step,
and for js the NNX graph rebuild and structure checks inside it), lowering to StableHLO, and
XLA compilation; it also counts the StableHLO lines of the programs and profiles js's trace by
package. A third variant, the hand-written step around the js-nn model itself, separates what
js-nn's formulation of the layers costs from what ``js.jit``, ``js.optim`` and ``js.losses``
add.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time
from collections import defaultdict

import jax


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _phases(traceable, args) -> dict:
    """Wall seconds of each phase, and ``cpu``: this process's CPU seconds over all three (on
    a machine shared with other work, CPU time moves less with the load than wall time)."""
    cpu = time.process_time()
    traced, t_trace = _timed(lambda: traceable.trace(*args))
    lowered, t_lower = _timed(traced.lower)
    _, t_compile = _timed(lowered.compile)
    cpu = time.process_time() - cpu
    lines = lowered.as_text().count("\n")
    return {
        "trace": t_trace,
        "lower": t_lower,
        "compile": t_compile,
        "cpu": cpu,
        "hlo_lines": lines,
    }


def _js_phases(fn, args) -> dict:
    """``fn`` a ``js.jit`` function: flatten (host), then the phases of its writing program."""
    from js._jit import Program
    from js._stateful import lay_out, read, split_call

    objects, key, dyn_args, dyn_kwargs = split_call(args, {})
    cpu = time.process_time()
    (layout, variables), t_flatten = _timed(lambda: lay_out("js.jit", objects, key))
    cpu = time.process_time() - cpu
    leaves = read(variables)
    program = Program(fn.__wrapped__, layout, donate=True).of_kind("write")
    out = _phases(program, (leaves, dyn_args, dyn_kwargs))
    out["flatten"] = t_flatten
    out["cpu"] += cpu
    jax.clear_caches()  # trace again, from scratch, under the profiler
    profile = cProfile.Profile()
    profile.enable()
    program.trace(leaves, dyn_args, dyn_kwargs)
    profile.disable()
    out["trace_by_package"] = _by_package(profile)
    return out


def _by_package(profile) -> dict:
    """Own (not cumulative) time of the trace, by top-level package of the function's file."""
    stats = pstats.Stats(profile)
    totals: dict[str, float] = defaultdict(float)
    for (filename, _, _), (_, _, own, _, _) in stats.stats.items():
        for package in (
            "js/",
            "flax/nnx",
            "optax",
            "jax/_src/interpreters",
            "jax/_src/lax",
            "jax/_src/numpy",
            "jax/_src",
            "tools/bench",
        ):
            if package in filename:
                totals[package] += own
                break
        else:
            totals["other"] += own
    return {k: round(v, 4) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def workloads():
    import jax.numpy as jnp
    import numpy as np

    import js.optim

    from . import _common as C
    from . import _mlp, _transformer

    def mlp():
        sizes, batch = (10, 16, 16, 4), 8
        x, y = C.classes(0, batch, sizes[0], sizes[-1])
        model = _mlp.js_model(sizes)
        js_args = (
            model,
            js.optim.Adam(model.parameters(), lr=C.LR),
            jnp.asarray(x),
            jnp.asarray(y),
        )

        def model_loss(model, x, y):  # the hand-written loss on the js model's output
            return C.cross_entropy(model(x), y)

        return (
            _mlp.js_step_fn,
            js_args,
            _mlp._jax_loss,
            C.param_arrays(model),
            (x, y),
            model_loss,
        )

    def transformer():
        batch, steps, dim = 16, 128, 256
        rng = np.random.default_rng(0)
        x, y = (rng.standard_normal((batch, steps, dim)).astype(np.float32) for _ in range(2))
        mask = np.asarray(_transformer.causal_mask(steps))
        model = _transformer.Block(dim, rngs=js.Rngs(params=0))
        js_args = (
            model,
            js.optim.Adam(model.parameters(), lr=C.LR),
            *(jnp.asarray(a) for a in (x, y, mask)),
        )

        def model_loss(model, x, y, mask):
            return jnp.mean(jnp.square(model(x, mask) - y))

        return (
            _transformer.js_step_fn,
            js_args,
            _transformer._jax_loss,
            C.param_dict(model),
            (x, y, mask),
            model_loss,
        )

    yield "tiny MLP", mlp
    yield "transformer block", transformer


def _around_js_model(model_loss, model, batch):
    """The hand-written step with the loss computed by the js-nn ``model`` itself (nnx.split
    outside, nnx.merge inside, as a hand-written NNX step does): js-nn's formulation of the
    layers without js.jit, js.optim or js.losses."""
    from flax import nnx

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss_fn(params, rest, *batch):
        return model_loss(nnx.merge(graphdef, params, rest), *batch), rest

    return _hand_written(loss_fn, params, batch, extra=rest)


def _hand_written(loss_fn, params, batch, extra=None):
    import functools

    import jax.numpy as jnp
    import optax

    from . import _common as C

    tx = optax.adam(C.LR)

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
    def step(params, opt_state, extra, *batch):
        (loss, extra), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, extra, *batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, extra, loss

    return step, (params, tx.init(params), extra, *(jnp.asarray(b) for b in batch))


PHASES = ("flatten", "trace", "lower", "compile")


def _median(rows: list[dict]) -> dict:
    out = dict(rows[-1])
    for key in (*PHASES, "cpu"):
        if key in out:
            out[key] = statistics.median(r[key] for r in rows)
    return out


# js.jit's step; the hand-written one; the hand-written one around the js-nn model.
VARIANTS = ("js.jit", "jax.jit", "jax.jit, js-nn model")


def measure(repeats: int = 3, only: str | None = None) -> dict[str, dict[str, dict]]:
    """``{workload: {"js.jit": phases, "jax.jit": phases}}``, medians of fresh compilations."""
    import js

    out = {}
    for name, build in workloads():
        if only and only.lower() not in name.lower():
            continue
        runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        # Round 0 warms the process up (XLA's first compilations are slower) and is dropped;
        # then the order alternates.
        for r in range(repeats + 1):
            for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                jax.clear_caches()
                step_fn, js_args, loss_fn, params, batch, model_loss = build()
                if variant == "js.jit":
                    row = _js_phases(js.jit(step_fn), js_args)
                elif variant == "jax.jit":
                    row = _phases(*_hand_written(loss_fn, params, batch))
                else:
                    row = _phases(*_around_js_model(model_loss, js_args[0], batch))
                if r:
                    runs[variant].append(row)
        out[name] = {v: _median(rs) for v, rs in runs.items()}
    return out


def _total(row: dict) -> float:
    return sum(row.get(k, 0.0) for k in PHASES)


def main(argv: list[str]) -> int:
    """``python -m tools.bench._compile [REPEATS [WORKLOAD]]``: the split and the ratios."""
    repeats = int(argv[0]) if argv else 3
    for name, rows in measure(repeats, argv[1] if len(argv) > 1 else None).items():
        print(f"## {name} (median of {repeats} fresh compilations each)")
        for variant, row in rows.items():
            phases = "  ".join(f"{k} {row[k]:.3f}" for k in PHASES if k in row)
            print(
                f"{variant:21s} total {_total(row):.3f} s: {phases}  (cpu {row['cpu']:.3f} s, "
                f"StableHLO {row['hlo_lines']} lines)"
            )
        for what, of in (("wall", _total), ("cpu", lambda row: row["cpu"])):
            js_total = of(rows["js.jit"])
            print(
                f"{what}: js.jit / jax.jit {js_total / of(rows['jax.jit']):.2f}; js.jit / "
                f"jax.jit around the js-nn model {js_total / of(rows['jax.jit, js-nn model']):.2f}"
            )
        print(
            "js trace (profiled, so slower), own time by package (s):",
            rows["js.jit"]["trace_by_package"],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
