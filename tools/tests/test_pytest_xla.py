"""tools/pytest_xla.py: the suites' compile flag."""

import os


def test_every_suite_compiles_at_the_lowest_backend_level():
    # pytest.ini loads the plugin, before any test module can start JAX's backend; child
    # processes inherit the environment
    assert "--xla_backend_optimization_level=0" in os.environ["XLA_FLAGS"].split()
