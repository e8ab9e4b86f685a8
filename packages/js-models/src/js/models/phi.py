"""Phi (phi-1, phi-1.5, phi-2): decoder-only transformers with a parallel block, as in
transformers 5.23's ``modeling_phi.py``.

Module names are transformers' (``model.layers.N.self_attn.dense``, ``model.final_layernorm``,
``lm_head``), so a Hugging Face folder's weights load without renaming. Where Phi differs from
the decoder skeleton's Llama arrangement (``_decoder.py``):

- one ``input_layernorm`` (LayerNorm with a bias) per block, read by attention and MLP at once:
  ``attn(ln(x)) + mlp(ln(x)) + x``;
- q/k/v projections with biases and an output projection ``dense``; with ``qk_layernorm`` a
  LayerNorm over each head's queries and keys (``q_layernorm``, ``k_layernorm``);
- rotary positions on the first ``partial_rotary_factor`` of each head (default 0.5);
- MLP ``fc2(act(fc1(x)))`` (``gelu_new``), a final ``final_layernorm``, a head with a bias.

Dropout: ``embd_pdrop`` and ``resid_pdrop`` apply in training mode (with a ``dropout`` stream);
``attention_dropout`` is not applied (the skeleton's attention has no dropout).
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax

from js import Module, Rngs, nn
from js.nn import KVCache

from ._base import PretrainedConfig, architectures
from ._decoder import (
    DecoderAttention,
    DecoderConfig,
    DecoderForCausalLM,
    DecoderModel,
    FeedForward,
)


class PhiConfig(DecoderConfig):
    """A Phi ``config.json``: transformers 5.23's ``PhiConfig`` keys and defaults.

    ``rope_theta`` and ``partial_rotary_factor`` (default 0.5) end up in ``rope_parameters``,
    as transformers 5 writes them.

    Example:
        >>> from js.models.phi import PhiConfig
        >>> PhiConfig(partial_rotary_factor=0.4).rope_parameters
        {'partial_rotary_factor': 0.4, 'rope_theta': 10000.0, 'rope_type': 'default'}
    """

    model_type: ClassVar[str] = "phi"
    family: ClassVar[str] = "Phi"
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 51200,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attention_dropout": 0.0,
        "hidden_act": "gelu_new",
        "max_position_embeddings": 2048,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-5,
        "use_cache": True,
        "tie_word_embeddings": False,
        "rope_parameters": None,
        "qk_layernorm": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": None,
    }

    def __init__(self, **kwargs: Any):
        # transformers: rope_parameters (or rope_scaling) first, then the top-level key
        rope = dict(kwargs.pop("rope_scaling", None) or kwargs.get("rope_parameters") or {})
        rope.setdefault("partial_rotary_factor", kwargs.pop("partial_rotary_factor", 0.5))
        super().__init__(**{**kwargs, "rope_parameters": rope})

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """Phi: every projection has a bias."""
        return True, True, True

    def make_norm(self, size: int) -> Module:
        """``LayerNorm`` (with a bias) and ``layer_norm_eps``."""
        return nn.LayerNorm(size, eps=self.layer_norm_eps)


class PhiAttention(DecoderAttention):
    """The skeleton's attention with the output projection ``dense`` and, with
    ``qk_layernorm``, LayerNorms over each head's queries and keys (before the rotary part)."""

    def init_projections(self, config: DecoderConfig, rngs: Rngs) -> None:
        super().init_projections(config, rngs)
        self.dense = self.o_proj
        del self.o_proj
        self.qk_layernorm = bool(config.qk_layernorm)
        if self.qk_layernorm:
            self.q_layernorm = config.make_norm(self.head_dim)
            self.k_layernorm = config.make_norm(self.head_dim)

    def project(self, hidden: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        q, k, v = super().project(hidden)
        if self.qk_layernorm:  # over each head's features: [B, L, n, D]
            q = self.q_layernorm(q.reshape(*q.shape[:-1], -1, self.head_dim)).reshape(q.shape)
            k = self.k_layernorm(k.reshape(*k.shape[:-1], -1, self.head_dim)).reshape(k.shape)
        return q, k, v

    def output(self, attended: jax.Array) -> jax.Array:
        return self.dense(attended)


class PhiMLP(FeedForward):
    """``fc2(act(fc1(x)))`` with ``hidden_act``."""


class PhiDecoderLayer(Module):
    """Parallel block: ``drop(self_attn(ln(x))) + drop(mlp(ln(x))) + x``, ``ln`` the one
    ``input_layernorm``."""

    def __init__(self, config: PhiConfig, layer_idx: int, *, rngs: Rngs):
        super().__init__()
        self.self_attn = PhiAttention(config, layer_idx, rngs=rngs)
        self.mlp = PhiMLP(config, rngs=rngs)
        self.input_layernorm = config.make_norm(config.hidden_size)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(
        self,
        hidden_states: jax.Array,
        mask: jax.Array,
        rope: tuple[jax.Array, jax.Array] | None,
        *,
        cache: KVCache | None = None,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        normed = self.input_layernorm(hidden_states)
        attended = self.resid_dropout(self.self_attn(normed, mask, rope, cache), rngs=rngs)
        fed = self.resid_dropout(self.mlp(normed), rngs=rngs)
        return attended + fed + hidden_states


class PhiModel(DecoderModel):
    """The Phi decoder without a head: token ids -> last hidden state ``[B, L, hidden]`` (see
    ``DecoderModel.forward``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.phi import PhiConfig, PhiModel
        >>> config = PhiConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=4)
        >>> PhiModel(config, rngs=js.Rngs(params=0))(jnp.array([[1, 2, 3]])).shape
        (1, 3, 16)
    """

    config_class: ClassVar[type[PretrainedConfig]] = PhiConfig
    layer_class: ClassVar[type[Module]] = PhiDecoderLayer
    norm_name: ClassVar[str] = "final_layernorm"

    def build(self, config: Any, rngs: Rngs) -> None:
        super().build(config, rngs)
        self.embed_dropout = nn.Dropout(config.embd_pdrop)

    def embed_positions(
        self,
        hidden: jax.Array,
        position_ids: jax.Array,
        added: jax.Array | None,
        *,
        rngs: Rngs | None,
    ) -> jax.Array:
        """``embed_dropout`` over the embeddings (no learned positions)."""
        return self.embed_dropout(
            super().embed_positions(hidden, position_ids, added, rngs=rngs), rngs=rngs
        )


class PhiForCausalLM(DecoderForCausalLM):
    """``PhiModel`` and the ``lm_head`` (with a bias) projecting to logits ``[B, L, vocab]``.

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.phi import PhiConfig, PhiForCausalLM
        >>> config = PhiConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=4)
        >>> model = PhiForCausalLM(config, rngs=js.Rngs(params=0))
        >>> model(jnp.array([[1, 2, 3]])).shape, model.lm_head.bias is not None
        ((1, 3, 32), True)
    """

    config_class: ClassVar[type[PretrainedConfig]] = PhiConfig
    base_model_class: ClassVar[type[DecoderModel]] = PhiModel

    def head_bias(self) -> bool:
        """Phi's head has a bias."""
        return True


ARCHITECTURES = architectures(PhiForCausalLM, PhiModel)
DEFAULT_ARCHITECTURE = "PhiForCausalLM"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "PhiConfig",
    "PhiForCausalLM",
    "PhiModel",
]
