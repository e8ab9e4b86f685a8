"""js benchmark harness: the js way against hand-written JAX, Flax NNX and PyTorch, interleaved.

Run from the repository root::

    python -m tools.bench              # full run: prints the table, writes docs/benchmarks*
    python -m tools.bench --smoke      # every workload tiny, a few steps (the test suite's mode)
    hatch run bench:run                # the same through the hatch environment

See ``docs/benchmarks.md`` for what every column means.
"""
