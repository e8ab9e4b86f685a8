"""GPT-NeoX (GPT-NeoX-20B, Pythia): decoder-only transformers with a fused query-key-value
projection and partial rotary positions, as in transformers 5.23's ``modeling_gpt_neox.py``.

Module names are those of the hub's files and of what transformers 5.23 writes
(``gpt_neox.layers.N.attention.query_key_value``, ``gpt_neox.final_layer_norm``, the head
``embed_out``; transformers' module ``lm_head`` is read as ``embed_out``). Where GPT-NeoX
differs from the decoder skeleton's Llama arrangement (``_decoder.py``):

- ``attention.query_key_value`` projects to ``[B, L, heads, 3 * head_dim]`` (each head's query,
  key and value side by side), ``attention.dense`` projects back; both with a bias unless
  ``attention_bias`` is false;
- rotary positions on the first ``rotary_pct`` of each head (default 0.25) with base
  ``rotary_emb_base``: both end up in ``rope_parameters`` (``partial_rotary_factor``,
  ``rope_theta``), as transformers 5 writes them;
- LayerNorms with biases; ``use_parallel_residual`` (default) makes a block
  ``x + attn(ln1(x)) + mlp(ln2(x))``, otherwise ``y = x + attn(ln1(x))``, ``y + mlp(ln2(y))``;
- MLP ``dense_4h_to_h(act(dense_h_to_4h(x)))`` (``gelu``); ``embed_out`` untied by default.

``hidden_dropout`` drops the embeddings and each sublayer's output in training mode (with a
``dropout`` stream); ``attention_dropout`` is not applied.
"""

from __future__ import annotations

from typing import Any

import jax

from js import Module, nn

from ._base import architectures
from ._decoder import DecoderAttention, DecoderConfig, DecoderLayer, FeedForward, decoder_classes
from ._rope import fold_rope_keys

__all__ = [
    "ARCHITECTURES",
    "GPTNeoXConfig",
    "GPTNeoXForCausalLM",
    "GPTNeoXModel",
]


class GPTNeoXConfig(DecoderConfig):
    """A GPT-NeoX ``config.json``: transformers 5.23's ``GPTNeoXConfig`` keys and defaults.

    The hub's ``rotary_emb_base`` and ``rotary_pct`` are read into ``rope_parameters`` and not
    written back (as transformers 5 does); every head has its own key and value.

    Example:
        >>> from js.models.gpt_neox import GPTNeoXConfig
        >>> GPTNeoXConfig(rotary_pct=0.5, rotary_emb_base=1000).rope_parameters
        {'rope_theta': 1000, 'partial_rotary_factor': 0.5, 'rope_type': 'default'}
    """

    model_type = "gpt_neox"
    attribute_map = {"num_key_value_heads": "num_attention_heads"}

    def __init__(self, **kwargs: Any):
        rope = fold_rope_keys(
            kwargs,
            rope_theta=("rotary_emb_base", 10000.0),
            partial_rotary_factor=("rotary_pct", 0.25),
        )
        super().__init__(**rope)

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """The attention's projections have a bias with ``attention_bias``; the MLP's always."""
        return self.attention_bias, self.attention_bias, True

    def make_norm(self, size: int) -> Module:
        """``LayerNorm`` (with a bias) and ``layer_norm_eps``."""
        return nn.LayerNorm(size, eps=self.layer_norm_eps)


class GPTNeoXAttention(DecoderAttention):
    """The skeleton's attention with the fused ``query_key_value`` (laid out per head, not
    all queries first) and the output ``dense``."""

    qkv_name = "query_key_value"
    output_name = "dense"

    def split_qkv(self, qkv: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        B, L, _ = qkv.shape  # per head: [query | key | value], head_dim each
        qkv = qkv.reshape(B, L, self.num_heads, 3, self.head_dim)
        q, k, v = (qkv[:, :, :, i].reshape(B, L, -1) for i in range(3))
        return q, k, v


class GPTNeoXMLP(FeedForward):
    """``dense_4h_to_h(act(dense_h_to_4h(x)))`` with ``hidden_act``."""

    in_name = "dense_h_to_4h"
    out_name = "dense_4h_to_h"


class GPTNeoXLayer(DecoderLayer):
    """A block with ``attention`` after ``input_layernorm`` and ``mlp`` after
    ``post_attention_layernorm``, each output through a dropout (``hidden_dropout``):
    ``x + attn(ln1(x)) + mlp(ln2(x))`` with ``use_parallel_residual``, else
    ``y = x + attn(ln1(x))``, ``y + mlp(ln2(y))``."""

    attention_class = GPTNeoXAttention
    attention_name = "attention"
    mlp_class = GPTNeoXMLP
    dropouts = ("post_attention_dropout", "post_mlp_dropout", "hidden_dropout")

    def arrange(self, config: DecoderConfig) -> None:
        self.parallel = bool(config.use_parallel_residual)


GPTNeoXModel, GPTNeoXForCausalLM = decoder_classes(
    GPTNeoXConfig,
    head_name="embed_out",
    base_model_prefix="gpt_neox",
    layer_class=GPTNeoXLayer,
    embed_name="embed_in",
    norm_name="final_layer_norm",
    embedding_dropout=("emb_dropout", "hidden_dropout"),
    embed_padding=False,  # transformers' embed_in has no padding row
    # transformers 5.23's module name of the head (its files say embed_out)
    key_mapping={r"^lm_head\.": "embed_out."},
    # buffers of older files, computed here (transformers' _keys_to_ignore_on_load_unexpected)
    ignore_on_load=(r"attention\.bias", r"attention\.masked_bias", r"rotary_emb\.inv_freq"),
)

ARCHITECTURES = architectures(GPTNeoXForCausalLM, GPTNeoXModel)
