"""Every use of jax's private modules (``jax._src``), in one place, tied to ``jax<0.11``.

js builds on jax's public API. Three things it needs have no public name; each is here, with
the reason, and no other module of any js distribution imports ``jax._src``
(``tools/check_imports.py`` refuses it). The upper bound ``jax>=0.10.0,<0.11`` in every
pyproject that declares jax is what makes them safe: before raising it, check every name below
against the new jax (``tests/test_jax_private.py`` checks that they exist and mean what js
assumes).
"""

from __future__ import annotations

# Which trace jax is recording now: a js.Module call records hooks only while tracing (the
# eager trace is the one jax runs outside any transformation). jax offers no public test.
from jax._src.core import eval_trace as _eval_trace
from jax._src.core import trace_ctx as _trace_ctx

# bound here, not by the import: an ``import ... as`` alias is not exported (_hooks, _module)
EVAL_TRACE, TRACE_CTX = _eval_trace, _trace_ctx

# The registry of cluster environments jax.distributed.initialize() detects (SLURM, Open MPI,
# Kubernetes, ...): js.training.detect_cluster asks the same classes, in the same order, without
# joining a job.
from jax._src import clusters as clusters  # noqa: E402

# jax's distributed state: whether its preemption sync manager runs in this process (then it
# owns SIGTERM, and js.training's stop on a signal defers to it).
from jax._src import distributed as distributed  # noqa: E402
