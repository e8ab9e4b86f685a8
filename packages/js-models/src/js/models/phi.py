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

In training mode (with a ``dropout`` stream) ``embd_pdrop`` drops embeddings and
``resid_pdrop`` each sublayer's output; the skeleton's attention has no dropout.
"""

from __future__ import annotations

from typing import Any

from js import Module, nn

from ._base import architectures
from ._decoder import DecoderAttention, DecoderConfig, DecoderLayer, FeedForward, decoder_classes
from ._rope import fold_rope_keys

__all__ = [
    "ARCHITECTURES",
    "PhiConfig",
    "PhiForCausalLM",
    "PhiModel",
]


class PhiConfig(DecoderConfig):
    """A Phi ``config.json``: transformers 5.23's ``PhiConfig`` keys and defaults.

    ``rope_theta`` and ``partial_rotary_factor`` (default 0.5) end up in ``rope_parameters``,
    as transformers 5 writes them.

    Example:
        >>> from js.models.phi import PhiConfig
        >>> PhiConfig(partial_rotary_factor=0.4).rope_parameters
        {'partial_rotary_factor': 0.4, 'rope_theta': 10000.0, 'rope_type': 'default'}
    """

    model_type = "phi"

    def __init__(self, **kwargs: Any):
        rope = fold_rope_keys(kwargs, partial_rotary_factor=("partial_rotary_factor", 0.5))
        super().__init__(**rope)

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """Phi: every projection has a bias."""
        return True, True, True

    def make_norm(self, size: int) -> Module:
        """``LayerNorm`` (with a bias) and ``layer_norm_eps``."""
        return nn.LayerNorm(size, eps=self.layer_norm_eps)

    def qk_norm(self) -> str | None:
        """With ``qk_layernorm``, a LayerNorm over each head's queries and keys."""
        return "head" if self.qk_layernorm else None

    def head_bias(self) -> bool:
        """Phi's ``lm_head`` has a bias."""
        return True


class PhiAttention(DecoderAttention):
    """The skeleton's attention with the output projection ``dense`` and, with
    ``qk_layernorm``, LayerNorms over each head's queries and keys (before the rotary part)."""

    output_name = "dense"
    qk_norm_names = ("q_layernorm", "k_layernorm")


class PhiMLP(FeedForward):
    """``fc2(act(fc1(x)))`` with ``hidden_act``."""


class PhiDecoderLayer(DecoderLayer):
    """Parallel block: ``drop(self_attn(ln(x))) + drop(mlp(ln(x))) + x``, ``ln`` the one
    ``input_layernorm``, ``drop`` the one ``resid_dropout``."""

    attention_class = PhiAttention
    mlp_class = PhiMLP
    norms = "shared"
    parallel = True
    dropouts = ("resid_dropout", "resid_dropout", "resid_pdrop")


PhiModel, PhiForCausalLM = decoder_classes(
    PhiConfig,
    layer_class=PhiDecoderLayer,
    norm_name="final_layernorm",
    embedding_dropout=("embed_dropout", "embd_pdrop"),
)

ARCHITECTURES = architectures(PhiForCausalLM, PhiModel)
