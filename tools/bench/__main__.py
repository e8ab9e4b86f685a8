"""``python -m tools.bench``: see :mod:`tools.bench.run`.

``--cores N`` pins this process to N cores *here*, before jax or torch is imported, so that
XLA's thread pool and torch's OpenMP threads are both sized for the same N cores.
"""

import sys

from ._cores import pin

pin(sys.argv[1:])

from .run import main  # noqa: E402  (after the pinning, which must precede jax and torch)

sys.exit(main())
