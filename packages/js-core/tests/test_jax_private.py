"""The private jax names js uses (all in ``js/_jax.py``) exist and mean what js assumes: the
check to run before raising the ``jax<0.11`` bound."""

import inspect

import jax
import jax.numpy as jnp

from js import _jax


def test_the_trace_names_tell_eager_code_from_a_trace():
    assert not isinstance(_jax.TRACE_CTX, type) and hasattr(_jax.TRACE_CTX, "trace")
    assert _jax.TRACE_CTX.trace is _jax.EVAL_TRACE  # outside any transformation
    seen = []

    @jax.jit
    def step(x):
        seen.append(_jax.TRACE_CTX.trace is _jax.EVAL_TRACE)
        return x + 1

    step(jnp.ones(2))
    assert seen == [False]


def test_the_cluster_registry_is_jax_s_with_what_detect_cluster_asks_of_it():
    kinds = _jax.clusters.ClusterEnv._cluster_types
    assert kinds and all(issubclass(kind, _jax.clusters.ClusterEnv) for kind in kinds)
    assert {"SlurmCluster", "OmpiCluster", "K8sCluster"} <= {kind.__name__ for kind in kinds}
    for kind in kinds:
        assert isinstance(kind.opt_in_only_method, bool)
        for method in ("is_env_present", "get_process_count", "get_process_id"):
            assert callable(getattr(kind, method)), (kind, method)
        assert (
            "override_coordinator_port"
            in inspect.signature(kind.get_coordinator_address).parameters
        )


def test_the_distributed_state_says_whether_a_preemption_manager_runs():
    assert _jax.distributed.__name__ == "jax._src.distributed"  # the module jax.distributed uses
    state = _jax.distributed.global_state
    assert state.preemption_sync_manager is None  # no job joined in this process
    assert state.client is None and state.service is None
