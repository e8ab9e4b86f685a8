"""GPT-2 (OpenAI's decoder-only transformer), as transformers 5.23 writes and reads it.

Module names follow transformers' ``modeling_gpt2.py`` (``transformer.h.0.attn.c_attn``), so a
Hugging Face GPT-2 folder loads without renaming. GPT-2's projections are ``Conv1D`` layers:
a weight ``[in, out]`` applied as ``x @ weight + bias`` (the transpose of ``nn.Linear``).

Example:
    >>> import jax.numpy as jnp, js
    >>> from js.models import GPT2Config, GPT2LMHeadModel
    >>> config = GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=16)
    >>> model = GPT2LMHeadModel(config, rngs=js.Rngs(params=0)).eval()
    >>> model(input_ids=jnp.array([[1, 2, 3]])).shape
    (1, 3, 100)
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from js import Module, Parameter, Rngs, nn
from js.nn import KVCache

from ._base import PreTrainedModel, architectures
from ._decoder import (
    DecoderAttention,
    DecoderConfig,
    DecoderForCausalLM,
    DecoderLayer,
    DecoderModel,
    FeedForward,
)
from ._hf import check_heads

__all__ = [
    "ARCHITECTURES",
    "GPT2Config",
    "GPT2LMHeadModel",
    "GPT2Model",
    "GPT2PreTrainedModel",
]


class GPT2Config(DecoderConfig):
    """GPT-2's ``config.json``, with transformers 5.23's defaults (the 124M model).

    ``hidden_size``, ``max_position_embeddings``, ``num_attention_heads`` and
    ``num_hidden_layers`` are aliases of ``n_embd``, ``n_positions``, ``n_head``, ``n_layer``.

    Example:
        >>> GPT2Config(n_layer=2).num_hidden_layers
        2
    """

    model_type = "gpt2"
    family = ""  # not GPT2...: its classes are named GPT2Model and GPT2LMHeadModel
    attribute_map = {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
        "num_key_value_heads": "n_head",  # every head has its own key and value
    }
    activation_key = "activation_function"

    @property
    def intermediate_size(self) -> int:
        """The MLP's width: ``n_inner``, or ``4 * n_embd`` when it is None (as transformers)."""
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd

    def attention_scale(self) -> float:
        """``head_dim ** -0.5`` with ``scale_attn_weights`` (the default), else 1."""
        return self.head_dim**-0.5 if self.scale_attn_weights else 1.0

    def make_norm(self, size: int) -> Module:
        """``LayerNorm`` with ``layer_norm_epsilon``."""
        return nn.LayerNorm(size, eps=self.layer_norm_epsilon)

    def layer_ropes(self) -> list[str | None]:
        """No rotary table: GPT-2 learns its positions (``wpe``)."""
        return [None] * self.n_layer


def _normal(rngs: Rngs, shape: tuple[int, ...], std: float) -> jax.Array:
    return nn.init.normal_(Parameter(jnp.zeros(shape, jnp.float32)), 0.0, std, rngs=rngs).value


class Conv1D(Module):
    """GPT-2's projection: ``x @ weight + bias`` with ``weight`` ``[nx, nf]`` (transformers'
    ``Conv1D(nf, nx)``, a linear layer stored transposed).

    Args:
        nf: output features.
        nx: input features.
        rngs: ``js.Rngs`` with a ``params`` stream.
        std: the weight's initial standard deviation (bias zeros).

    Shape:
        input ``[..., nx]``, output ``[..., nf]``.
    """

    # A linear layer stored [in, out]: ``js.nn.lora`` adapts it as PEFT does GPT-2's Conv1D
    # (``fan_in_fan_out=True``).
    fan_in_fan_out: ClassVar[bool] = True

    def __init__(self, nf: int, nx: int, *, rngs: Rngs, std: float = 0.02):
        super().__init__()
        self.nf, self.nx = nf, nx
        self.weight = Parameter(_normal(rngs, (nx, nf), std))
        self.bias = Parameter(jnp.zeros((nf,), jnp.float32))

    def forward(self, x: jax.Array) -> jax.Array:
        return x @ self.weight.value + self.bias.value

    def extra_repr(self) -> str:
        return f"nf={self.nf}, nx={self.nx}"


class GPT2Attention(DecoderAttention):
    """The skeleton's attention with GPT-2's fused ``c_attn`` and its ``c_proj`` (``Conv1D``
    layers), the weights' dropout ``attn_pdrop`` in training, and with
    ``scale_attn_by_inverse_layer_idx`` the scores also divided by ``layer_idx + 1``."""

    qkv_name = "c_attn"
    output_name = "c_proj"
    dropout_key = "attn_pdrop"

    def __init__(self, config: GPT2Config, layer_idx: int, *, rngs: Rngs):
        check_heads("GPT2Config", config.n_embd, config.n_head, ("n_embd", "n_head"))
        super().__init__(config, layer_idx, rngs=rngs)
        if config.scale_attn_by_inverse_layer_idx:
            self.scale /= float(layer_idx + 1)

    def init_projections(self, config: DecoderConfig, rngs: Rngs) -> None:
        embed_dim, std = config.n_embd, config.initializer_range
        self.c_attn = Conv1D(3 * embed_dim, embed_dim, rngs=rngs, std=std)
        self.c_proj = Conv1D(embed_dim, embed_dim, rngs=rngs, std=_projection_std(config))


class GPT2MLP(FeedForward):
    """``c_proj(act(c_fc(x)))`` (``Conv1D`` layers) with ``activation_function``."""

    in_name = "c_fc"
    out_name = "c_proj"

    def linear(
        self, config: DecoderConfig, name: str, n_in: int, n_out: int, *, rngs: Rngs
    ) -> Module:
        std = _projection_std(config) if name == self.out_name else config.initializer_range
        return Conv1D(n_out, n_in, rngs=rngs, std=std)


def _projection_std(config: DecoderConfig) -> float:
    """GPT-2's initial std of the projections back into the residual stream."""
    return config.initializer_range / math.sqrt(2 * config.n_layer)


class GPT2Block(DecoderLayer):
    """Pre-norm block: ``x + drop(attn(ln_1(x)))``, then ``x + drop(mlp(ln_2(x)))``, ``drop``
    the residual dropout ``resid_pdrop``."""

    attention_class = GPT2Attention
    attention_name = "attn"
    mlp_class = GPT2MLP
    norms = "ln"
    dropouts = ("resid_dropout", "mlp_dropout", "resid_pdrop")


class GPT2PreTrainedModel(PreTrainedModel):
    """What every GPT-2 class shares: its config class, prefix and ignored file keys."""

    config_class = GPT2Config
    base_model_prefix = "transformer"
    # Files written by older transformers carry the causal mask as buffers; the mask is
    # computed in forward here (transformers' _keys_to_ignore_on_load_unexpected).
    ignore_on_load: ClassVar[tuple[str, ...]] = (
        r"attn\.bias",
        r"attn\.masked_bias",
        r"crossattention\.(masked_)?bias",
    )

    def max_positions(self) -> int:
        """Positions the model embeds (``n_positions``): prompt plus new tokens at most."""
        return self.config.n_positions


class GPT2Model(GPT2PreTrainedModel, DecoderModel):
    """The GPT-2 transformer without a head: returns the last hidden state ``[B, L, n_embd]``
    (the decoder skeleton with learned positions ``wpe``, blocks ``h`` and norm ``ln_f``).

    Args:
        config: a ``GPT2Config``.
        rngs: ``js.Rngs`` with a ``params`` stream.

    Example:
        >>> import jax.numpy as jnp, js
        >>> config = GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=10, n_positions=8)
        >>> model = GPT2Model(config, rngs=js.Rngs(params=0)).eval()
        >>> model(input_ids=jnp.array([[1, 2]])).shape
        (1, 2, 16)
    """

    embed_name = "wte"
    layers_name = "h"
    norm_name = "ln_f"
    embedding_dropout = ("drop", "embd_pdrop")
    position_embedding_name = "wpe"

    def build(self, config: Any, rngs: Rngs) -> None:
        if getattr(config, "add_cross_attention", False):
            raise NotImplementedError(
                "GPT2Model: add_cross_attention=True (GPT-2 as an encoder-decoder's decoder) is "
                "not supported. Fix: set add_cross_attention=False in the config"
            )
        std = config.initializer_range
        self.embed_dim = config.n_embd
        self.wte = nn.Embedding(config.vocab_size, config.n_embd, rngs=rngs)
        self.wte.weight = Parameter(_normal(rngs, (config.vocab_size, config.n_embd), std))
        self.wpe = nn.Embedding(config.n_positions, config.n_embd, rngs=rngs)
        self.wpe.weight = Parameter(_normal(rngs, (config.n_positions, config.n_embd), std))
        self.h = nn.ModuleList([GPT2Block(config, i, rngs=rngs) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    def cache_layout(self) -> tuple[int, int, int]:
        config = self.config
        return config.n_layer, config.n_head, config.n_embd // config.n_head

    def embed(self, input_ids: Any, inputs_embeds: Any) -> jax.Array:
        hidden = super().embed(input_ids, inputs_embeds)
        if hidden.shape[1] > self.config.n_positions:
            raise ValueError(
                f"GPT2Model: the sequence has {hidden.shape[1]} positions, the model "
                f"{self.config.n_positions} (n_positions). Fix: shorten the input"
            )
        return hidden

    def forward(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        token_type_ids: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        inputs_embeds: jax.Array | None = None,
        *,
        rngs: Rngs | None = None,
        cache: KVCache | None = None,
    ) -> jax.Array:
        """The last hidden state ``[B, L, n_embd]``.

        Args:
            input_ids: token ids ``[B, L]`` (or pass ``inputs_embeds`` ``[B, L, n_embd]``).
            attention_mask: ``[B, L]``, 1 for tokens and 0 for padding (left or right).
            token_type_ids: ``[B, L]`` ids embedded with ``wte`` and added, as transformers.
            position_ids: ``[B, L]`` or ``[1, L]`` (default ``0..L-1``).
            inputs_embeds: instead of ``input_ids``.
            rngs: ``js.Rngs`` with a ``dropout`` stream, for dropout in training mode.
            cache: a ``js.nn.KVCache`` (``make_cache``) to decode with: the tokens are stored
                after those of earlier calls and attend to them; positions continue each row's
                count (``position_ids`` overrides them). See ``js.models.generate``.
        """
        hidden = self.embed(input_ids, inputs_embeds)
        types = None if token_type_ids is None else self.wte(jnp.asarray(token_type_ids))
        return self.decode(
            hidden, attention_mask, position_ids, cache=cache, rngs=rngs, added=types
        )


class GPT2LMHeadModel(GPT2PreTrainedModel, DecoderForCausalLM):
    """GPT-2 with its language-modelling head: returns logits ``[B, L, vocab_size]``
    (``forward`` takes ``GPT2Model.forward``'s arguments and ``logits_to_keep``).

    With ``tie_word_embeddings`` (the default) ``lm_head.weight`` is the same Parameter as
    ``transformer.wte.weight``, and a saved folder holds it once, as transformers writes it.

    Args:
        config: a ``GPT2Config``.
        rngs: ``js.Rngs`` with a ``params`` stream.
    """

    base_model_class: ClassVar[type[DecoderModel]] = GPT2Model
    transformer: GPT2Model  # set by DecoderForCausalLM.__init__ (base_model_prefix)
    lm_head: nn.Linear

    def __init__(self, config: GPT2Config, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        if not config.tie_word_embeddings:
            self.lm_head.weight = Parameter(
                _normal(rngs, (config.vocab_size, config.n_embd), config.initializer_range)
            )


ARCHITECTURES = architectures(GPT2LMHeadModel, GPT2Model)
