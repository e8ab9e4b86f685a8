"""The Markdown table and the PNG chart of a run."""

from __future__ import annotations

import statistics
from pathlib import Path

from ._harness import REFERENCE, Result

# Where compute dominates, the js step must be within 10 % of hand-written; elsewhere 20 %.
COMPUTE_BOUND = {"MLP 784-512-512-10", "CNN 28x28", "LSTM", "transformer block"}


def _time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    return f"{seconds * 1e3:.2f} ms"


def _paired(torch_rounds, rounds) -> str:
    """The median over rounds of torch's time / this variant's, paired within each round."""
    if not torch_rounds or len(torch_rounds) != len(rounds):
        return "-"
    return f"{statistics.median(t / v for t, v in zip(torch_rounds, rounds, strict=True)):.2f}"


def _target(r: Result, ref_memory) -> str:
    if r.variant == "js Trainer.fit":
        return "ok" if r.ratio <= 1.15 else "MISSED (<= 1.15)"
    if r.variant != "js":
        return ""
    limit = 1.1 if r.workload in COMPUTE_BOUND else 1.2
    verdict = "ok" if r.ratio <= limit else f"MISSED (<= {limit})"
    if r.memory_bytes and ref_memory:
        if r.memory_bytes > 1.1 * ref_memory:
            verdict += ", memory MISSED (<= 1.1x)"
        else:
            verdict += ", memory ok"
    return verdict


def table(results: list[Result], lstm_compile: list[dict], info: dict) -> str:
    lines = [
        "| workload | variant | time / step | vs hand-written JAX | torch / variant | GFLOP/s "
        "| compile s | program MB | memory vs hand-written | target |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    memory = {(r.workload, r.variant): r.memory_bytes for r in results}
    torch = {r.workload: r.rounds for r in results if r.variant == "torch"}
    for r in results:
        ref_mem = memory.get((r.workload, REFERENCE))
        mem = f"{r.memory_bytes / 2**20:.2f}" if r.memory_bytes else "-"
        mem_ratio = f"{r.memory_bytes / ref_mem:.3f}" if r.memory_bytes and ref_mem else "-"
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        compile_s = "-" if r.compile_s is None else f"{r.compile_s:.2f}"
        vs_torch = _paired(torch.get(r.workload), r.rounds)
        gflops = f"{r.flops / r.step_s / 1e9:.1f}" if r.flops else "-"
        lines.append(
            f"| {r.workload} | {r.variant} | {_time(r.step_s)} | {ratio} | {vs_torch} | {gflops} "
            f"| {compile_s} | {mem} | {mem_ratio} | {_target(r, ref_mem)} |"
        )
    peak = [f"{k[5:-7]} {v} GFLOP/s" for k, v in info.items() if k.startswith("peak_")]
    lines += [
        "",
        "torch / variant > 1: the variant is faster than torch. GFLOP/s: the "
        "hand-written step's FLOPs (XLA's count; the LSTM's by hand) / the variant's "
        "time per step. "
        f"Peak, one large float32 matmul: {', '.join(peak) or '-'}.",
    ]
    lines += [
        "",
        "LSTM compile time (first call minus a steady call), s:",
        "",
        "| T | js | hand-written JAX |",
        "|---:|---:|---:|",
    ]
    by_t: dict[int, dict] = {}
    for row in lstm_compile:
        by_t.setdefault(row["T"], {})[row["variant"]] = row["compile_s"]
    for steps, row in sorted(by_t.items()):
        lines.append(f"| {steps} | {row.get('js', 0):.2f} | {row.get('jax', 0):.2f} |")
    machine = ", ".join(f"{k} {v}" for k, v in info.items())
    lines += ["", f"Machine: {machine}.", ""]
    return "\n".join(lines)


def chart(results: list[Result], path: Path, info: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    workloads = list(dict.fromkeys(r.workload for r in results))
    ratios = [r.ratio for r in results if r.ratio]
    low, high = min(ratios + [1.0]) * 0.8, max(ratios + [1.2]) * 1.6
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500) if low <= t <= high]
    fig, axes = plt.subplots(
        len(workloads),
        1,
        squeeze=False,
        figsize=(8, 1.1 + 0.42 * len(results)),
        gridspec_kw={"height_ratios": [sum(r.workload == w for r in results) for w in workloads]},
    )
    for ax, workload in zip(axes[:, 0], workloads, strict=True):
        rows = [r for r in results if r.workload == workload and r.ratio is not None]
        colors = [
            "tab:blue"
            if r.variant.startswith("js")
            else "tab:gray"
            if r.variant == REFERENCE
            else "tab:orange"
            for r in rows
        ]
        ax.barh([r.variant for r in rows], [r.ratio for r in rows], color=colors)
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(lambda value, _: f"{value:g}")
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.axvline(1.0, color="k", lw=0.8)
        ax.axvline(1.2, color="tab:red", lw=0.8, ls="--")
        ax.set_title(workload, fontsize=9, loc="left")
        ax.tick_params(labelsize=8)
        ax.invert_yaxis()
        for i, r in enumerate(rows):
            ax.text(r.ratio, i, f" {r.ratio:.2f}x", va="center", fontsize=7)
    axes[-1, 0].set_xlabel("time per step / hand-written JAX step (log; dashed: 1.2)")
    fig.suptitle(
        f"js vs hand-written JAX, nnx, torch: {info.get('cpu')}, "
        f"{info.get('cores')} cores, jax {info.get('jax')}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
