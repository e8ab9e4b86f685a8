"""pytest plugin: the test suites compile at XLA's lowest backend optimization level.

Most of a suite's time is XLA:CPU compiling small programs once each; LLVM's optimizations
make those programs faster to run, which a test of a few steps never repays. With
``--xla_backend_optimization_level=0`` the js-nn layer, recurrent and attention tests took
0.80x the time (89 s against 111 s, side by side). Only the code generated for the CPU changes:
the HLO program, its fusions and its memory analysis stay the same, and every test passes
unchanged. Child processes inherit the flag through the environment.

pytest.ini loads it (``-p tools.pytest_xla``), so every suite gets it; it sets nothing when
``XLA_FLAGS`` already chooses a level. Benchmarks (``tools/bench``) run outside pytest and keep
XLA's default level. The flag is read when JAX starts its backend, which is after pytest loads
its plugins.
"""

from __future__ import annotations

import os

FLAG = "--xla_backend_optimization_level=0"

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_backend_optimization_level" not in _flags:
    os.environ["XLA_FLAGS"] = f"{_flags} {FLAG}".strip()
