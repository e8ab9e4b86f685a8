"""pytest plugin: where a suite compares with PyTorch, torch computes on one thread.

Once the test modules are imported (and with them torch, where a suite compares with it), it
calls ``torch.set_num_threads(1)``. The tensors a test compares are far below torch's parallel
grain, so the results are the same; but torch's second intra-op thread spins while it waits,
beside XLA's threads on a 2-core machine and beside a second suite when ``test:all`` runs two at
once (tools/run_lanes.py): a 100-step torch run took 3-8x longer.

It also imports ``torch.fx.experimental.symbolic_shapes`` then, and with it sympy (about 3 s):
torch imports it on the first call of several functions (attention with a mask, its
optimizers), and that time would otherwise land on whichever test makes that call first, over
the per-test budget (tools/check_durations.py).

pytest.ini loads it (``-p tools.pytest_torch``), so every suite gets it; a suite without torch
is left alone. The benchmarks run outside pytest and set torch's threads themselves.
"""

from __future__ import annotations

import sys


def pytest_collection_finish(session) -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
        import torch.fx.experimental.symbolic_shapes  # noqa: F401
