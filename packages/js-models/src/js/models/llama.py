"""Llama and its close kin (Qwen2, Mistral): decoder-only transformers with RMSNorm, rotary
position embeddings, grouped-query attention and a SwiGLU MLP, as in transformers 5.23.

Module names are transformers' (``model.layers.N.self_attn.q_proj``, ``model.norm``,
``lm_head``), so a Hugging Face folder's weights load without renaming. One set of blocks
serves the three families; their configs say where they differ:

- Llama: ``attention_bias`` (q, k, v and o), ``mlp_bias``; full causal attention.
- Qwen2: q, k and v always have a bias, o never; sliding-window layers only with
  ``use_sliding_window`` (layers from ``max_window_layers`` on, or as ``layer_types`` says).
- Mistral: no biases; every layer attends within ``sliding_window`` when it is set.

Rotary embeddings follow ``rope_parameters`` (transformers 5's spelling, written back) or the
hub's older ``rope_theta`` + ``rope_scaling``; rope types "default", "linear" and "llama3".
Their inverse frequencies are computed from the config in ``forward`` (transformers keeps
them in a non-persistent float32 buffer: they are in no weight file, and casting the model's
dtype cannot round them here).

Masks follow transformers' ``create_causal_mask``: a 2D ``attention_mask`` [B, L] (nonzero =
a real token) hides padded keys; without one and with ``config.use_cache`` false,
``position_ids`` that restart (packed sequences) keep each sequence to itself. A query row
with no allowed key (a left-padded position) gets a zero attention output, as PyTorch's
``scaled_dot_product_attention`` (transformers' default attention) gives it, so padded
positions match transformers too. Inference only: ``attention_dropout`` is not applied.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, cast

import jax
import jax.numpy as jnp

from js import Module, Rngs, nn
from js.nn import KVCache
from js.nn import functional as F

from ._base import PretrainedConfig, PreTrainedModel
from ._checkpointing import GradientCheckpointingMixin
from ._generation import GenerationMixin
from ._hf import ACTIVATIONS

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")

# ---------------------------------------------------------------------------------------------
# Configs


class LlamaConfig(PretrainedConfig):
    """A Llama ``config.json``: transformers 5.23's ``LlamaConfig`` keys and defaults.

    ``head_dim`` defaults to ``hidden_size // num_attention_heads`` and
    ``num_key_value_heads`` to ``num_attention_heads``. Rotary settings end up in
    ``rope_parameters`` (``{"rope_type": ..., "rope_theta": ..., ...}``), read from it or from
    the older ``rope_theta`` + ``rope_scaling`` keys, which are not written back (as
    transformers 5 does).

    Example:
        >>> from js.models.llama import LlamaConfig
        >>> config = LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=5e5)
        >>> config.head_dim, config.num_key_value_heads, config.rope_parameters
        (16, 4, {'rope_theta': 500000.0, 'rope_type': 'default'})
    """

    # the keys the blocks read (set from ``defaults`` and config.json by ``__init__``)
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str
    rms_norm_eps: float
    pad_token_id: int | None
    tie_word_embeddings: bool
    rope_parameters: dict[str, Any]
    attention_bias: bool
    mlp_bias: bool
    use_cache: bool

    model_type: ClassVar[str] = "llama"
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "use_cache": True,
        "pad_token_id": None,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "rope_parameters": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "head_dim": None,
    }

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if getattr(self, "head_dim", None) is None and "head_dim" in self.defaults:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        self.rope_parameters = _standard_rope_parameters(vars(self))

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> LlamaConfig:
        """The config of a ``config.json`` mapping. ``LlamaConfig.from_dict`` returns the
        config class of the file's ``model_type`` (a Qwen2 or Mistral file without
        ``architectures`` reaches the family's default class, ``LlamaForCausalLM``, which then
        builds Qwen2's or Mistral's blocks)."""
        kind = _CONFIG_CLASSES.get(config.get("model_type", ""), cls) if cls is LlamaConfig else cls
        return kind(**dict(config))

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """Whether (q/k/v projections, o projection, MLP projections) have a bias."""
        return bool(self.attention_bias), bool(self.attention_bias), bool(self.mlp_bias)

    def sliding_windows(self) -> list[int | None]:
        """Each layer's sliding window (None: full causal attention). Llama: none."""
        return [None] * self.num_hidden_layers


class Qwen2Config(LlamaConfig):
    """A Qwen2 ``config.json`` (transformers 5.23's ``Qwen2Config`` keys and defaults).

    ``sliding_window`` is None unless ``use_sliding_window``; ``layer_types`` defaults to
    "sliding_attention" from layer ``max_window_layers`` on when it is set.

    Example:
        >>> from js.models.llama import Qwen2Config
        >>> Qwen2Config(num_hidden_layers=2).layer_types
        ['full_attention', 'full_attention']
    """

    use_sliding_window: bool
    sliding_window: int | None
    max_window_layers: int
    layer_types: list[str]

    model_type: ClassVar[str] = "qwen2"
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "use_cache": True,
        "tie_word_embeddings": False,
        "rope_parameters": None,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
        "layer_types": None,
        "attention_dropout": 0.0,
        "pad_token_id": None,
        "bos_token_id": None,
        "eos_token_id": None,
    }

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if not self.use_sliding_window:
            self.sliding_window = None
        if self.layer_types is None:
            self.layer_types = [
                "sliding_attention"
                if self.sliding_window is not None and i >= self.max_window_layers
                else "full_attention"
                for i in range(self.num_hidden_layers)
            ]

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """Qwen2: q, k and v have a bias, o and the MLP none."""
        return True, False, False

    def sliding_windows(self) -> list[int | None]:
        """``sliding_window`` for the "sliding_attention" layers of ``layer_types``."""
        if len(self.layer_types) < self.num_hidden_layers:
            raise ValueError(
                f"Qwen2Config: layer_types has {len(self.layer_types)} entries for "
                f"{self.num_hidden_layers} layers. Fix: one per layer, or leave it out"
            )
        windows = []
        for kind in self.layer_types[: self.num_hidden_layers]:
            if kind == "sliding_attention" and self.sliding_window is None:
                raise ValueError(
                    "Qwen2Config: layer_types has sliding_attention layers but sliding_window "
                    "is None (use_sliding_window is false). Fix: set use_sliding_window and "
                    "sliding_window, or make every layer full_attention"
                )
            windows.append(self.sliding_window if kind == "sliding_attention" else None)
        return windows


class MistralConfig(LlamaConfig):
    """A Mistral ``config.json`` (transformers 5.23's ``MistralConfig`` keys and defaults).

    Every layer attends to the last ``sliding_window`` positions (itself included) when
    ``sliding_window`` is set; None means full causal attention.

    Example:
        >>> from js.models.llama import MistralConfig
        >>> MistralConfig().sliding_window, MistralConfig().num_key_value_heads
        (4096, 8)
    """

    sliding_window: int | None

    model_type: ClassVar[str] = "mistral"
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": None,
        "hidden_act": "silu",
        "max_position_embeddings": 4096 * 32,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "use_cache": True,
        "pad_token_id": None,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "rope_parameters": None,
        "sliding_window": 4096,
        "attention_dropout": 0.0,
    }

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """Mistral: no biases."""
        return False, False, False

    def sliding_windows(self) -> list[int | None]:
        """``sliding_window`` (or None) for every layer."""
        return [self.sliding_window] * self.num_hidden_layers


_CONFIG_CLASSES: dict[str, type[LlamaConfig]] = {
    "llama": LlamaConfig,
    "qwen2": Qwen2Config,
    "mistral": MistralConfig,
}


def _standard_rope_parameters(values: dict[str, Any]) -> dict[str, Any]:
    """transformers 5's ``rope_parameters`` from a config's keys: ``rope_scaling`` (hub files)
    or ``rope_parameters``, with ``rope_theta`` (default 10000) and ``rope_type`` (from the old
    ``type`` key, default "default") filled in; ``rope_scaling``/``rope_theta`` are removed."""
    scaling = values.pop("rope_scaling", None)
    theta = values.pop("rope_theta", None)
    rope = dict(scaling or values.get("rope_parameters") or {})
    rope.setdefault("rope_theta", 10000.0 if theta is None else theta)
    rope.setdefault("rope_type", rope.get("type", "default"))
    if rope["rope_type"] in ("llama3", "yarn", "longrope"):
        rope.setdefault("original_max_position_embeddings", values.get("max_position_embeddings"))
    return rope


def _rope_inv_freq(config: LlamaConfig) -> tuple[jax.Array, float]:
    """``(inv_freq [head_dim // 2] float32, attention_scaling)`` of ``config.rope_parameters``,
    as transformers' ``ROPE_INIT_FUNCTIONS`` compute them (modeling_rope_utils.py)."""
    rope = config.rope_parameters
    kind = rope["rope_type"]
    if kind not in SUPPORTED_ROPE_TYPES:
        raise NotImplementedError(
            f"{type(config).__name__}: rope_type {kind!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_ROPE_TYPES)}. Fix: use a model with one of those"
        )
    partial = rope.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0):
        raise NotImplementedError(
            f"{type(config).__name__}: partial_rotary_factor={partial!r} (rotary on part of "
            "each head) is not supported; only 1.0 is. Fix: use a model without it"
        )
    dim = _head_dim(config)
    inv_freq = F.rope_inv_freq(dim, float(rope["rope_theta"]))
    if kind == "linear":
        inv_freq = inv_freq / _rope_key(config, "factor")
    elif kind == "llama3":
        inv_freq = _llama3_inv_freq(config, inv_freq)
    return inv_freq, 1.0


def _rope_key(config: LlamaConfig, key: str) -> Any:
    rope = config.rope_parameters
    if rope.get(key) is None:
        raise KeyError(
            f"{type(config).__name__}: rope_type {rope['rope_type']!r} needs {key!r} in "
            f"rope_parameters (or rope_scaling), got {rope}. Fix: add it to config.json"
        )
    return rope[key]


def _llama3_inv_freq(config: LlamaConfig, inv_freq: jax.Array) -> jax.Array:
    """Llama 3.1's frequency scaling: long wavelengths divided by ``factor``, short ones kept,
    the ones between interpolated smoothly (transformers' ``_compute_llama3_parameters``)."""
    factor = _rope_key(config, "factor")
    low, high = _rope_key(config, "low_freq_factor"), _rope_key(config, "high_freq_factor")
    old_context = _rope_key(config, "original_max_position_embeddings")
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = jnp.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return jnp.where(medium, smoothed, scaled)


def _head_dim(config: LlamaConfig) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


# ---------------------------------------------------------------------------------------------
# Blocks


class LlamaRotaryEmbedding(Module):
    """``(cos, sin)`` ``[B, L, head_dim]`` for ``position_ids`` ``[B, L]`` (HF's duplicated-half
    layout), from ``config.rope_parameters``. Holds no arrays: the inverse frequencies are
    computed from the config when called (transformers keeps them as a non-persistent buffer).
    """

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        _rope_inv_freq(config)  # an unsupported rope type fails when the model is built

    def forward(self, position_ids: jax.Array, dtype: Any = jnp.float32) -> tuple[jax.Array, ...]:
        inv_freq, scaling = _rope_inv_freq(self.config)  # [head_dim / 2]
        return F.rotary_cos_sin(position_ids, inv_freq, attention_scaling=scaling, dtype=dtype)


class LlamaMLP(Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))`` (SwiGLU with ``hidden_act`` "silu")."""

    def __init__(self, config: LlamaConfig, *, rngs: Rngs):
        super().__init__()
        if config.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"{type(config).__name__}: hidden_act {config.hidden_act!r} is not supported; "
                f"supported: {', '.join(ACTIVATIONS)}"
            )
        hidden, inner, bias = (
            config.hidden_size,
            config.intermediate_size,
            config.projection_biases()[2],
        )
        self.gate_proj = nn.Linear(hidden, inner, bias=bias, rngs=rngs)
        self.up_proj = nn.Linear(hidden, inner, bias=bias, rngs=rngs)
        self.down_proj = nn.Linear(inner, hidden, bias=bias, rngs=rngs)
        self.hidden_act = config.hidden_act

    def forward(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.hidden_act]
        return self.down_proj(act(self.gate_proj(x)) * self.up_proj(x))


class LlamaAttention(Module):
    """Causal grouped-query self-attention with rotary positions: ``num_attention_heads``
    query heads share ``num_key_value_heads`` key/value heads of ``head_dim`` each."""

    def __init__(self, config: LlamaConfig, layer_idx: int, *, rngs: Rngs):
        super().__init__()
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        if heads % kv_heads:
            raise ValueError(
                f"{type(config).__name__}: num_attention_heads ({heads}) must be a multiple of "
                f"num_key_value_heads ({kv_heads})"
            )
        self.layer_idx, self.head_dim = layer_idx, _head_dim(config)
        self.num_heads, self.num_key_value_heads = heads, kv_heads
        qkv_bias, o_bias, _ = config.projection_biases()
        hidden, dim = config.hidden_size, self.head_dim
        self.q_proj = nn.Linear(hidden, heads * dim, bias=qkv_bias, rngs=rngs)
        self.k_proj = nn.Linear(hidden, kv_heads * dim, bias=qkv_bias, rngs=rngs)
        self.v_proj = nn.Linear(hidden, kv_heads * dim, bias=qkv_bias, rngs=rngs)
        self.o_proj = nn.Linear(heads * dim, hidden, bias=o_bias, rngs=rngs)

    def forward(
        self,
        hidden_states: jax.Array,
        cos: jax.Array,
        sin: jax.Array,
        mask: jax.Array,
        cache: KVCache | None = None,
    ) -> jax.Array:
        B, L, _ = hidden_states.shape

        def heads(x: jax.Array) -> jax.Array:  # [B, L, n * D] -> [B, n, L, D]
            return x.reshape(B, L, -1, self.head_dim).transpose(0, 2, 1, 3)

        q = F.apply_rotary_pos_emb(heads(self.q_proj(hidden_states)), cos, sin)  # [B, H, L, D]
        k = F.apply_rotary_pos_emb(heads(self.k_proj(hidden_states)), cos, sin)  # [B, KV, L, D]
        v = heads(self.v_proj(hidden_states))  # [B, KV, L, D]
        if cache is not None:  # every cached slot: [B, KV, max_length, D]
            k, v = cache.update(self.layer_idx, k, v)
        # query head h reads kv head h // (H / KV); a row with no allowed key gives zeros
        out = F.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)  # [B, H, L, D]
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))


class LlamaDecoderLayer(Module):
    """Pre-norm block: ``x + self_attn(input_layernorm(x))``, then
    ``x + mlp(post_attention_layernorm(x))``."""

    def __init__(self, config: LlamaConfig, layer_idx: int, *, rngs: Rngs):
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx, rngs=rngs)
        self.mlp = LlamaMLP(config, rngs=rngs)
        self.input_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: jax.Array,
        cos: jax.Array,
        sin: jax.Array,
        mask: jax.Array,
        cache: KVCache | None = None,
    ) -> jax.Array:
        attended = self.self_attn(self.input_layernorm(hidden_states), cos, sin, mask, cache)
        x = hidden_states + attended
        return x + self.mlp(self.post_attention_layernorm(x))


def _causal_mask(
    attention_mask: jax.Array | None, packed_positions: jax.Array | None, L: int, window: int | None
) -> jax.Array:
    """transformers' ``create_causal_mask`` / ``create_sliding_window_causal_mask`` as a
    boolean [B|1, 1, L, L] (True = allowed).

    Key ``j`` is allowed for query ``i`` when ``j <= i`` and ``i - j < window``, and, with a 2D
    ``attention_mask`` [B, L], token ``j`` is real. Without one, ``packed_positions`` [B, L]
    (when given) are compared instead of indices, within each run of consecutive positions
    (transformers' packed sequences; one run per row gives the plain causal mask).
    """
    idx = jnp.arange(L)
    q, kv = idx[:, None], idx[None, :]  # [L, 1], [1, L]
    allowed = (kv <= q)[None]  # [1, L, L]
    if attention_mask is not None:
        allowed = allowed & (attention_mask != 0)[:, None, :]  # [B, L, L]
    elif packed_positions is not None:
        pos = packed_positions  # [B, L]
        steps = jnp.diff(pos, axis=-1, prepend=pos[:, :1] - 1)
        run = jnp.cumsum(steps != 1, axis=-1)  # [B, L]: which packed sequence
        q, kv = pos[:, :, None], pos[:, None, :]  # [B, L, 1], [B, 1, L]
        allowed = (run[:, :, None] == run[:, None, :]) & (kv <= q)
    if window is not None:
        allowed = allowed & (kv > q - window)
    return allowed[:, None]  # [B|1, 1, L, L]


# ---------------------------------------------------------------------------------------------
# Models


class LlamaModel(GradientCheckpointingMixin, PreTrainedModel):
    """The Llama decoder without a head: token ids -> last hidden state ``[B, L, hidden]``.

    Args:
        config: a ``LlamaConfig`` (or ``Qwen2Config``/``MistralConfig``).
        rngs: ``js.Rngs`` with a ``params`` stream.

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.llama import LlamaConfig, LlamaModel
        >>> config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2)
        >>> LlamaModel(config, rngs=js.Rngs(params=0))(jnp.array([[1, 2, 3]])).shape
        (1, 3, 16)
    """

    config_class: ClassVar[type[PretrainedConfig]] = LlamaConfig
    base_model_prefix: ClassVar[str] = "model"

    def __init__(self, config: LlamaConfig, *, rngs: Rngs):
        super().__init__(config)
        self.sliding_windows = tuple(config.sliding_windows())
        self.embed_tokens = nn.Embedding(
            config.vocab_size, config.hidden_size, config.pad_token_id, rngs=rngs
        )
        self.layers = nn.ModuleList(
            [LlamaDecoderLayer(config, i, rngs=rngs) for i in range(config.num_hidden_layers)]
        )
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def _config_json(self) -> dict[str, Any]:
        """config.json's keys, ``architectures`` named after the config's ``model_type``."""
        return {**self.config.to_dict(), "architectures": [_architecture(self)]}

    def make_cache(self, batch_size: int, max_length: int, *, dtype: Any = None) -> KVCache:
        """A ``js.nn.KVCache`` for this decoder: one layer per decoder layer, storing the
        ``num_key_value_heads`` heads only, in ``dtype`` (default: the embedding's dtype)."""
        config = cast(LlamaConfig, self.config)
        dtype = self.embed_tokens.weight.value.dtype if dtype is None else dtype
        layers, heads = config.num_hidden_layers, config.num_key_value_heads
        return KVCache(batch_size, max_length, layers, heads, _head_dim(config), dtype=dtype)

    def _embed(self, input_ids: jax.Array | None, inputs_embeds: jax.Array | None) -> jax.Array:
        name = type(self).__name__
        both = f"{name}: give exactly one of input_ids and inputs_embeds"
        if inputs_embeds is not None:
            if input_ids is not None:
                raise ValueError(both)
            if jnp.ndim(inputs_embeds) != 3:
                raise ValueError(
                    f"{name}: inputs_embeds must be [B, L, hidden], got shape "
                    f"{list(jnp.shape(inputs_embeds))}"
                )
            return inputs_embeds
        if input_ids is None:
            raise ValueError(both)
        if jnp.ndim(input_ids) != 2:
            raise ValueError(
                f"{name}: input_ids must be [B, L] (a batch of sequences), got shape "
                f"{list(jnp.shape(input_ids))}. Fix: add the batch axis, e.g. ids[None]"
            )
        return self.embed_tokens(input_ids)

    def forward(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        inputs_embeds: jax.Array | None = None,
        *,
        cache: KVCache | None = None,
    ) -> jax.Array:
        """The last hidden state ``[B, L, hidden]`` (after the final ``norm``).

        Args:
            input_ids: token ids ``[B, L]`` (or give ``inputs_embeds`` ``[B, L, hidden]``).
            attention_mask: ``[B, L]``, nonzero for real tokens, 0 for padding (left or
                right). None: every token is real.
            position_ids: ``[B, L]`` or ``[L]``; default ``0..L-1`` for every row, as in
                transformers (for left padding pass e.g. ``cumsum(mask) - 1`` yourself).
                With ``config.use_cache`` false and no ``attention_mask``, positions that
                restart mark packed sequences that do not attend to each other, as
                transformers' forward does then (with its default ``use_cache=True`` it
                does not look for them).
            cache: a ``js.nn.KVCache`` (``make_cache``) to decode with: the tokens are stored
                after those of earlier calls and attend to them (within each layer's sliding
                window); positions continue each row's count (``position_ids`` overrides
                them). See ``js.models.generate``.
        """
        hidden = self._embed(input_ids, inputs_embeds)  # [B, L, hidden]
        B, L = hidden.shape[:2]
        if attention_mask is not None and tuple(jnp.shape(attention_mask)) != (B, L):
            raise ValueError(
                f"{type(self).__name__}: attention_mask must be [B, L] = {[B, L]} (1 for real "
                f"tokens, 0 for padding), got shape {list(jnp.shape(attention_mask))}"
            )
        if cache is not None:
            position_ids = cache.begin(L, attention_mask, position_ids)  # [B, L]
        position_ids = jnp.arange(L) if position_ids is None else jnp.asarray(position_ids)
        if position_ids.shape not in ((L,), (1, L), (B, L)):
            raise ValueError(
                f"{type(self).__name__}: position_ids must be [B, L], [1, L] or [L] with "
                f"[B, L] = {[B, L]}, got shape {list(position_ids.shape)}"
            )
        position_ids = jnp.broadcast_to(position_ids, (B, L))
        cos, sin = self.rotary_emb(position_ids, hidden.dtype)  # [B, L, head_dim]
        # transformers looks for packed sequences only when called without a cache
        # (use_cache False, which defaults to config.use_cache)
        packed = None if getattr(self.config, "use_cache", True) else position_ids
        masks = {
            window: (
                _causal_mask(attention_mask, packed, L, window)
                if cache is None
                else cache.mask(L, window)  # [B, 1, L, max_length]
            )
            for window in set(self.sliding_windows)
        }
        checkpointed = self._checkpointed(self.training, cache)
        for layer, window in zip(self.layers, self.sliding_windows, strict=True):
            if checkpointed is not None:  # gradient_checkpointing_enable(): js.remat per block
                hidden = checkpointed(layer, hidden, cos, sin, masks[window])
            else:
                hidden = layer(hidden, cos, sin, masks[window], cache)
        return self.norm(hidden)


class LlamaForCausalLM(GenerationMixin, GradientCheckpointingMixin, PreTrainedModel):
    """``LlamaModel`` and the ``lm_head`` projection to next-token logits ``[B, L, vocab]``.

    With ``tie_word_embeddings``, ``lm_head.weight`` is ``model.embed_tokens.weight`` (one
    Parameter, written once, as transformers does).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.llama import LlamaConfig, LlamaForCausalLM
        >>> config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=4, tie_word_embeddings=True)
        >>> model = LlamaForCausalLM(config, rngs=js.Rngs(params=0))
        >>> model(jnp.array([[1, 2, 3]])).shape
        (1, 3, 32)
        >>> model.lm_head.weight is model.model.embed_tokens.weight
        True
    """

    config_class: ClassVar[type[PretrainedConfig]] = LlamaConfig
    base_model_prefix: ClassVar[str] = "model"
    base_model_class: ClassVar[type[LlamaModel]] = LlamaModel

    def __init__(self, config: LlamaConfig, *, rngs: Rngs):
        super().__init__(config)
        self.model = self.base_model_class(config, rngs=rngs)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False, rngs=rngs)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def _config_json(self) -> dict[str, Any]:
        """config.json's keys, ``architectures`` named after the config's ``model_type``."""
        return {**self.config.to_dict(), "architectures": [_architecture(self)]}

    def make_cache(self, batch_size: int, max_length: int, *, dtype: Any = None) -> KVCache:
        """A ``js.nn.KVCache`` for this model (see ``LlamaModel.make_cache``)."""
        return self.model.make_cache(batch_size, max_length, dtype=dtype)

    def forward(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        inputs_embeds: jax.Array | None = None,
        *,
        cache: KVCache | None = None,
        logits_to_keep: int = 0,
    ) -> jax.Array:
        """Logits ``[B, L, vocab]``; arguments as ``LlamaModel.forward``.

        ``logits_to_keep=n > 0`` computes the logits of the last ``n`` positions only
        (``[B, n, vocab]``), as transformers' argument does; 0 (default) computes all.
        """
        hidden = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            cache=cache,
        )
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        return self.lm_head(hidden)


class Qwen2Model(LlamaModel):
    """Qwen2's decoder (``LlamaModel`` blocks; q/k/v biases, optional sliding layers)."""

    config_class: ClassVar[type[PretrainedConfig]] = Qwen2Config


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2 with its language-model head (see ``LlamaForCausalLM``)."""

    config_class: ClassVar[type[PretrainedConfig]] = Qwen2Config
    base_model_class: ClassVar[type[LlamaModel]] = Qwen2Model


class MistralModel(LlamaModel):
    """Mistral's decoder (``LlamaModel`` blocks; no biases, sliding-window attention)."""

    config_class: ClassVar[type[PretrainedConfig]] = MistralConfig


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral with its language-model head (see ``LlamaForCausalLM``)."""

    config_class: ClassVar[type[PretrainedConfig]] = MistralConfig
    base_model_class: ClassVar[type[LlamaModel]] = MistralModel


def _architecture(model: LlamaModel | LlamaForCausalLM) -> str:
    """transformers' class name for ``model``'s ``model_type`` ("Qwen2ForCausalLM" for a
    ``LlamaForCausalLM`` built from a ``Qwen2Config``)."""
    family = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral"}.get(
        model.config.model_type, "Llama"
    )
    return family + ("ForCausalLM" if isinstance(model, LlamaForCausalLM) else "Model")


ARCHITECTURES: dict[str, type[PreTrainedModel]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "LlamaModel": LlamaModel,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "Qwen2Model": Qwen2Model,
    "MistralForCausalLM": MistralForCausalLM,
    "MistralModel": MistralModel,
}
DEFAULT_ARCHITECTURE = "LlamaForCausalLM"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "SUPPORTED_ROPE_TYPES",
    "LlamaConfig",
    "LlamaForCausalLM",
    "LlamaModel",
    "MistralConfig",
    "MistralForCausalLM",
    "MistralModel",
    "Qwen2Config",
    "Qwen2ForCausalLM",
    "Qwen2Model",
]
