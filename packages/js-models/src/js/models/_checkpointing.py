"""Gradient checkpointing for the decoder models, under transformers' method names.

``model.gradient_checkpointing_enable()`` makes the model's decoder run each block through
``js.remat`` in training (no cache): the block's activations are recomputed in the backward
pass instead of kept. Logits and gradients are unchanged (to float32 rounding); dropout draws
the same masks when recomputed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from js import Module, remat

# transformers' gradient_checkpointing_kwargs go to torch.utils.checkpoint: these have no
# meaning for jax.checkpoint (a single, non-reentrant implementation) and are accepted.
_IGNORED = frozenset({"use_reentrant", "preserve_rng_state", "determinism_check", "debug"})


def _call_block(block: Module, hidden: Any, *args: Any, **kwargs: Any) -> Any:
    return block(hidden, *args, **kwargs)


class GradientCheckpointingMixin:
    """``gradient_checkpointing_enable``/``_disable`` and ``is_gradient_checkpointing``.

    A class holding blocks checks :meth:`_checkpointed` in its forward; the methods set the
    flag on every such module of the model (the decoder inside an LM-head model too).
    """

    supports_gradient_checkpointing = True
    gradient_checkpointing = False  # set per instance by gradient_checkpointing_enable
    _checkpoint_policy: Any = None

    def gradient_checkpointing_enable(
        self, gradient_checkpointing_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """Recompute each block's activations in the backward pass (transformers' method).

        Args:
            gradient_checkpointing_kwargs: ``{"policy": ...}``, a ``js.remat`` policy (None,
                a ``jax.checkpoint_policies`` function or its name, e.g. ``"dots_saveable"``).
                torch's ``use_reentrant`` and ``preserve_rng_state`` are accepted and have no
                effect here.

        Example:
            >>> import js
            >>> from js.models.gpt2 import GPT2Config, GPT2LMHeadModel
            >>> config = GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=10, n_positions=8)
            >>> model = GPT2LMHeadModel(config, rngs=js.Rngs(params=0))
            >>> model.gradient_checkpointing_enable()
            >>> model.is_gradient_checkpointing
            True
        """
        kwargs = dict(gradient_checkpointing_kwargs or {})
        policy = kwargs.pop("policy", None)
        remat(_call_block, policy)  # js.remat checks the policy now: a ValueError for a bad one
        unknown = sorted(set(kwargs) - _IGNORED)
        if unknown:
            raise TypeError(
                f"gradient_checkpointing_enable: unknown gradient_checkpointing_kwargs {unknown}."
                " Fix: pass {'policy': ...} (a js.remat policy) or nothing"
            )
        self._set_checkpointing(True, policy)

    def gradient_checkpointing_disable(self) -> None:
        """Keep activations again (transformers' method)."""
        self._set_checkpointing(False, None)

    @property
    def is_gradient_checkpointing(self) -> bool:
        """Whether some block of the model is checkpointed (transformers' property)."""
        return any(
            getattr(module, "gradient_checkpointing", False) for module in self._modules_here()
        )

    def _modules_here(self) -> list[Any]:
        """This model's modules (every class using the mixin is a ``js.Module``)."""
        return list(self.modules()) if isinstance(self, Module) else [self]

    def _set_checkpointing(self, enabled: bool, policy: Any) -> None:
        for module in self._modules_here():
            if isinstance(module, GradientCheckpointingMixin):
                module.gradient_checkpointing = enabled
                module._checkpoint_policy = policy

    def _checkpointed(self, training: bool, cache: Any) -> Callable[..., Any] | None:
        """``fn(block, hidden, *args, **kwargs)`` running a block under ``js.remat``, or None
        when blocks run plainly (not enabled, evaluation, or decoding with a cache)."""
        if not (self.gradient_checkpointing and training and cache is None):
            return None
        return remat(_call_block, self._checkpoint_policy)
