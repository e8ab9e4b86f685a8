"""The decoder skeleton every causal language model of js.models is built on.

One forward for every family: **embed** (token ids, checked once here, or ``inputs_embeds``;
an optional scale) -> **positions** (counted by the cache when decoding; learned position
embeddings added here by families that have them) -> **masks** (one per sliding window, from
``js.nn.attention.decoder_mask`` or the cache) -> **blocks** (``js.remat`` per block under
gradient checkpointing) -> **final norm** -> **head** (tied or not, ``logits_to_keep``, logit
scaling and soft-capping). A family is a config and the pieces where it differs:

- ``DecoderConfig`` subclass: ``model_type``, ``defaults`` (transformers' keys and defaults), and
  the hooks below where the family differs from Llama.
- Modules: ``DecoderAttention`` (grouped-query attention with rotary positions, q/k norms, a
  score scale, soft-capping; fused projections by overriding ``project``), ``GatedMLP``
  (``down(act(gate(x)) * up(x))``), ``DecoderLayer`` (pre-norm residual block); a family
  subclasses the one whose arrangement differs.
- ``DecoderModel`` / ``DecoderForCausalLM`` subclasses naming the family's classes and module
  names (``embed_name``, ``layers_name``, ``norm_name``, ``head_name``, ``base_model_prefix``),
  so that transformers' state-dict names hold without renaming; ``decoder_classes`` makes the
  pair of a family whose classes add nothing but its config (and layer class).

The generation contract (``make_cache``, ``forward(..., cache=, logits_to_keep=)``) is the
``CausalLM`` Protocol of ``_generation.py``.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, NamedTuple, TypeVar

import jax
import jax.numpy as jnp

from js import Module, Rngs, nn
from js.nn import KVCache
from js.nn import functional as F
from js.nn.attention import decoder_mask

from ._base import PretrainedConfig, PreTrainedModel
from ._checkpointing import GradientCheckpointingMixin
from ._generation import GenerationMixin
from ._hf import (
    activation,
    check_tokens,
    merge_heads,
    passing_signature,
    split_heads,
    with_signature,
)
from ._rope import check_rope, rope_cos_sin, standard_rope_parameters

M = TypeVar("M", bound="DecoderModel")
H = TypeVar("H", bound="DecoderForCausalLM")
_DROPOUTS = "dropouts = (attention's dropout name, the MLP's, the config key of their rate)"


def refuse_renamed_hooks(cls: type, **renamed: str) -> None:
    """Refuses a subclass that still sets a class variable or method the skeleton renamed
    (``renamed``: old name -> what to write now), rather than ignoring it silently."""
    for old, fix in renamed.items():
        if old in vars(cls):
            raise TypeError(f"{cls.__name__}: {old} was renamed and is not read. Fix: {fix}")


# ---------------------------------------------------------------------------------------------
# Config


class DecoderConfig(PretrainedConfig):
    """A decoder's ``config.json`` with the hooks the skeleton reads; the defaults are Llama's
    arrangement (pre-norm RMSNorm blocks, rotary on the whole head, SwiGLU, no biases).

    ``head_dim`` defaults to ``hidden_size // num_attention_heads`` and
    ``num_key_value_heads`` to ``num_attention_heads``; rotary settings end up in
    ``rope_parameters`` (transformers 5's spelling), read from it or from the older
    ``rope_theta`` + ``rope_scaling`` keys, which are not written back (as transformers 5 does).
    """

    # the keys the skeleton reads (set from ``defaults`` and config.json by ``__init__``)
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
    use_cache: bool
    # where the family has them (``sliding_windows`` reads them)
    sliding_window: int | None
    layer_types: list[str]

    # the family's name in transformers' class names ("Llama" -> LlamaForCausalLM): a config
    # class that names its model_type and no family is named for its class (LlamaConfig)
    family: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "model_type" in vars(cls) and "family" not in vars(cls):
            cls.family = cls.__name__.removesuffix("Config")

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if "head_dim" in self.defaults and getattr(self, "head_dim", None) is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if "num_key_value_heads" in self.defaults and self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if "rope_parameters" in self.defaults:
            self.rope_parameters = standard_rope_parameters(vars(self))

    def __getattr__(self, name: str) -> Any:
        if name == "head_dim":  # a family whose config.json has no head_dim key (Qwen2)
            return self.hidden_size // self.num_attention_heads
        return super().__getattr__(name)

    def architecture(self, causal: bool) -> str:
        """transformers' class name for a model of this config (``architectures``)."""
        return self.family + ("ForCausalLM" if causal else "Model")

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """Whether (q/k/v projections, o projection, MLP projections) have a bias."""
        bias = bool(getattr(self, "attention_bias", False))
        return bias, bias, bool(getattr(self, "mlp_bias", False))

    def sliding_windows(self) -> list[int | None]:
        """Each layer's sliding window (None: full causal attention); from ``layer_types``
        ("sliding_attention" layers attend within ``sliding_window``) when the config has it."""
        if getattr(self, "layer_types", None) is None:
            return [None] * self.num_hidden_layers
        kinds = self.per_layer("layer_types", "or leave it out")
        window = getattr(self, "sliding_window", None)
        if window is None and "sliding_attention" in kinds:
            raise ValueError(
                f"{type(self).__name__}: layer_types has sliding_attention layers but "
                "sliding_window is None. Fix: set sliding_window, or make every layer "
                "full_attention"
            )
        return [window if kind == "sliding_attention" else None for kind in kinds]

    def per_layer(self, key: str, fix: str) -> list[Any]:
        """The first ``num_hidden_layers`` entries of the per-layer list ``key`` (refused when
        it has fewer; ``fix`` completes the error's "Fix: one per layer, ...")."""
        values = list(getattr(self, key))
        if len(values) < self.num_hidden_layers:
            raise ValueError(
                f"{type(self).__name__}: {key} has {len(values)} entries for "
                f"{self.num_hidden_layers} layers. Fix: one per layer, {fix}"
            )
        return values[: self.num_hidden_layers]

    def layer_ropes(self) -> list[str | None]:
        """Each layer's rotary table (a key of ``rope_parameters_for``; None: no rotary)."""
        return ["default"] * self.num_hidden_layers

    def rope_parameters_for(self, kind: str) -> dict[str, Any]:
        """The ``rope_parameters`` of a ``layer_ropes`` key (one table unless overridden)."""
        return self.rope_parameters

    def rotary_dim(self) -> int:
        """Features of a head that rotate: ``head_dim * partial_rotary_factor``."""
        factor = self.rope_parameters.get(
            "partial_rotary_factor", getattr(self, "partial_rotary_factor", None)
        )
        return self.head_dim if factor is None else int(self.head_dim * factor)

    def attention_scale(self) -> float:
        """The factor of the attention scores (``head_dim ** -0.5``)."""
        return self.head_dim**-0.5

    def qk_norm(self) -> str | None:
        """Norms of the queries and keys: None, "head" (over each head's features: Qwen3,
        Gemma 3) or "projection" (over the whole projection: OLMo 2)."""
        return None

    def make_norm(self, size: int) -> Module:
        """The family's norm over ``size`` features (``RMSNorm`` with ``rms_norm_eps``)."""
        return nn.RMSNorm(size, eps=self.rms_norm_eps)

    def embedding_scale(self) -> float | None:
        """A factor of the embeddings (Gemma's ``sqrt(hidden_size)``), or None."""
        return None

    def head_bias(self) -> bool:
        """Whether the ``lm_head`` has a bias (Phi's has)."""
        return False


# ---------------------------------------------------------------------------------------------
# Blocks


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate ``x`` ``[B, H, L, D]`` by ``cos``/``sin`` ``[B, L, R]``: the first ``R`` features
    (all of them unless the rotary part is partial), the rest passed through."""
    rotary = cos.shape[-1]
    if rotary == x.shape[-1]:
        return F.apply_rotary_pos_emb(x, cos, sin)
    turned = F.apply_rotary_pos_emb(x[..., :rotary], cos, sin)
    return jnp.concatenate([turned, x[..., rotary:]], axis=-1)


class DecoderAttention(Module):
    """Causal grouped-query self-attention: ``num_attention_heads`` query heads share
    ``num_key_value_heads`` key/value heads of ``head_dim``; rotary positions (when the layer
    has a table), q/k norms (named by ``qk_norm_names``), the config's score scale and
    ``attn_logit_softcapping``; the weights' dropout in training only where ``dropout_key``
    names its config key (GPT-2's ``attn_pdrop``; others' ``attention_dropout`` is not applied).
    The projections are ``q_proj``, ``k_proj``, ``v_proj`` or one ``qkv_name`` (all queries,
    then all keys, then all values: Phi-3's ``qkv_proj``), and ``output_name``."""

    qkv_name: ClassVar[str | None] = None
    output_name: ClassVar[str] = "o_proj"
    qk_norm_names: ClassVar[tuple[str, str]] = ("q_norm", "k_norm")
    dropout_key: ClassVar[str | None] = None

    def __init__(self, config: DecoderConfig, layer_idx: int, *, rngs: Rngs):
        super().__init__()
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        if heads % kv_heads:
            raise ValueError(
                f"{type(config).__name__}: num_attention_heads ({heads}) must be a multiple of "
                f"num_key_value_heads ({kv_heads})"
            )
        self.layer_idx, self.head_dim = layer_idx, config.head_dim
        self.num_heads, self.num_key_value_heads = heads, kv_heads
        self.scale = float(config.attention_scale())
        softcap = getattr(config, "attn_logit_softcapping", None)
        self.softcap = None if softcap is None else float(softcap)
        self.dropout = 0.0 if self.dropout_key is None else float(getattr(config, self.dropout_key))
        self.init_projections(config, rngs)
        self.qk_norm = config.qk_norm()
        if self.qk_norm is not None:  # over each head's features, or over all heads'
            sizes = (1, 1) if self.qk_norm == "head" else (heads, kv_heads)
            for name, n in zip(self.qk_norm_names, sizes, strict=True):
                setattr(self, name, config.make_norm(n * self.head_dim))

    def init_projections(self, config: DecoderConfig, rngs: Rngs) -> None:
        """The projections (families with another layout override this and ``project``)."""
        qkv_bias, o_bias, _ = config.projection_biases()
        hidden, sizes = config.hidden_size, self.qkv_sizes()
        if self.qkv_name is not None:
            fused = nn.Linear(hidden, sum(sizes), bias=qkv_bias, rngs=rngs)
            setattr(self, self.qkv_name, fused)
        else:
            self.q_proj, self.k_proj, self.v_proj = (
                nn.Linear(hidden, size, bias=qkv_bias, rngs=rngs) for size in sizes
            )
        setattr(self, self.output_name, nn.Linear(sizes[0], hidden, bias=o_bias, rngs=rngs))

    def qkv_sizes(self) -> tuple[int, int, int]:
        """The features of the queries, keys and values: ``heads * head_dim`` (kv heads)."""
        kv = self.num_key_value_heads * self.head_dim
        return self.num_heads * self.head_dim, kv, kv

    def project(self, hidden: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Queries, keys and values ``[B, L, heads * head_dim]`` (and kv heads)."""
        if self.qkv_name is None:
            return self.q_proj(hidden), self.k_proj(hidden), self.v_proj(hidden)
        return self.split_qkv(getattr(self, self.qkv_name)(hidden))

    def split_qkv(self, qkv: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The fused projection's output split: all queries, then all keys, then all values."""
        q, k, _ = self.qkv_sizes()
        return qkv[..., :q], qkv[..., q : q + k], qkv[..., q + k :]

    def output(self, attended: jax.Array) -> jax.Array:
        """The heads merged ``[B, L, heads * head_dim]`` projected back to the hidden size."""
        return getattr(self, self.output_name)(attended)

    def norm_qk(self, q: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The queries and keys through their norms (``qk_norm_names``)."""
        q_norm, k_norm = (getattr(self, name) for name in self.qk_norm_names)
        return q_norm(q), k_norm(k)

    def forward(
        self,
        hidden_states: jax.Array,
        mask: jax.Array,
        rope: tuple[jax.Array, jax.Array] | None,
        cache: KVCache | None = None,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        q, k, v = self.project(hidden_states)
        if self.qk_norm == "projection":
            q, k = self.norm_qk(q, k)

        heads = self.num_heads, self.num_key_value_heads, self.num_key_value_heads
        q, k, v = (split_heads(x, n) for x, n in zip((q, k, v), heads, strict=True))
        if self.qk_norm == "head":
            q, k = self.norm_qk(q, k)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is not None:  # every cached slot: [B, KV, max_length, D]
            k, v = cache.update(self.layer_idx, k, v)
        # query head h reads kv head h // (H / KV); a row with no allowed key gives zeros
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            mask,
            p,
            scale=self.scale,
            enable_gqa=True,
            softcap=self.softcap,
            dropout_key=rngs.next("dropout") if p > 0 and rngs is not None else None,
        )  # [B, H, L, D]
        return self.keyless_rows(self.output(merge_heads(out)), hidden_states, mask)

    def keyless_rows(self, out: jax.Array, hidden_states: jax.Array, mask: jax.Array) -> jax.Array:
        """The output ``[B, L, hidden]`` with the rows of queries that may attend to no key
        (padding): as computed, from zeros as sdpa gives them (Gemma 2 gives eager's)."""
        return out


class GatedMLP(Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))`` (SwiGLU with ``hidden_act`` "silu"); the
    activation is the config key its class names in ``activation_key`` where it has one
    (Gemma 2 and 3: ``hidden_activation``)."""

    def __init__(self, config: DecoderConfig, *, rngs: Rngs, intermediate_size: int | None = None):
        super().__init__()
        key = getattr(type(config), "activation_key", "hidden_act")
        self.hidden_act = getattr(config, key)
        activation(type(config).__name__, key, self.hidden_act)
        hidden, bias = config.hidden_size, config.projection_biases()[2]
        inner = config.intermediate_size if intermediate_size is None else intermediate_size
        self.gate_proj = nn.Linear(hidden, inner, bias=bias, rngs=rngs)
        self.up_proj = nn.Linear(hidden, inner, bias=bias, rngs=rngs)
        self.down_proj = nn.Linear(inner, hidden, bias=bias, rngs=rngs)

    def forward(self, x: jax.Array) -> jax.Array:
        act = activation("GatedMLP", "hidden_act", self.hidden_act)
        return self.down_proj(act(self.gate_proj(x)) * self.up_proj(x))


class FeedForward(Module):
    """``out(act(in(x)))``: the ungated MLP (Phi, GPT-NeoX, GPT-2), its two linear layers
    (with biases, made by ``linear``) named by ``in_name`` and ``out_name``; the activation is
    the config key its class names in ``activation_key`` where it has one (GPT-2:
    ``activation_function``), else ``hidden_act``."""

    in_name: ClassVar[str] = "fc1"
    out_name: ClassVar[str] = "fc2"

    def __init__(self, config: DecoderConfig, *, rngs: Rngs):
        super().__init__()
        self.activation_key = getattr(type(config), "activation_key", "hidden_act")
        self.hidden_act = getattr(config, self.activation_key)
        activation(type(config).__name__, self.activation_key, self.hidden_act)
        hidden, inner = config.hidden_size, config.intermediate_size
        setattr(self, self.in_name, self.linear(config, self.in_name, hidden, inner, rngs=rngs))
        setattr(self, self.out_name, self.linear(config, self.out_name, inner, hidden, rngs=rngs))

    def linear(
        self, config: DecoderConfig, name: str, n_in: int, n_out: int, *, rngs: Rngs
    ) -> Module:
        """The projection ``name`` (``nn.Linear`` with a bias)."""
        return nn.Linear(n_in, n_out, rngs=rngs)

    def forward(self, x: jax.Array) -> jax.Array:
        act = activation(type(self).__name__, self.activation_key, self.hidden_act)
        return getattr(self, self.out_name)(act(getattr(self, self.in_name)(x)))


class Around(NamedTuple):
    """The norms and the dropout around one sublayer of a ``DecoderLayer`` (attention or the
    MLP), by module name; None where there is none."""

    norm_in: str | None = None  # a norm of the sublayer's input
    norm_out: str | None = None  # a norm of its output
    dropout: str | None = None  # a dropout of its output


# The norms around attention and the MLP in each arrangement a ``DecoderLayer`` can name
# (``norms``), by transformers' module names; one name twice is one norm that both read
BLOCK_NORMS: dict[str, tuple[Around, Around]] = {
    "pre": (Around("input_layernorm"), Around("post_attention_layernorm")),  # Llama
    "sandwich": (  # Gemma 2 and 3: each sublayer's input and output
        Around("input_layernorm", "post_attention_layernorm"),
        Around("pre_feedforward_layernorm", "post_feedforward_layernorm"),
    ),
    "post": (  # OLMo 2: the outputs only
        Around(norm_out="post_attention_layernorm"),
        Around(norm_out="post_feedforward_layernorm"),
    ),
    "shared": (Around("input_layernorm"), Around("input_layernorm")),  # Phi
    "ln": (Around("ln_1"), Around("ln_2")),  # GPT-2: pre-norm under its own names
}


class DecoderLayer(Module):
    """A residual block: attention (the module ``attention_name``), then the MLP, with the
    norms ``BLOCK_NORMS[norms]`` around them, one after the other or in ``parallel``, each
    output through a dropout where ``dropouts`` names one.

    The default is Llama's pre-norm block, ``y = x + m * self_attn(input_layernorm(x))``, then
    ``y + m * mlp(post_attention_layernorm(y))``, ``m`` the config's ``residual_multiplier``
    (1 unless set: Granite); in parallel ``x + (attn(x) + mlp(x))``, each with its norms. A
    family's block sets the class variables below, and ``arrange`` where its config picks.
    """

    attention_class: ClassVar[type[DecoderAttention]] = DecoderAttention
    mlp_class: ClassVar[type[Any]] = GatedMLP
    attention_name: ClassVar[str] = "self_attn"
    # the dropouts of attention's and the MLP's outputs, if the family has them: their module
    # names (one name twice: one module) and the config key of their probability
    dropouts: ClassVar[tuple[str, str, str] | None] = None
    # the arrangement (``arrange`` may set it from the config): a key of BLOCK_NORMS, and
    # whether attention and the MLP both read the block's input
    norms: str = "pre"
    parallel: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        refuse_renamed_hooks(cls, dropout_names=_DROPOUTS, dropout_key=_DROPOUTS)

    def __init__(self, config: DecoderConfig, layer_idx: int, *, rngs: Rngs):
        super().__init__()
        setattr(self, self.attention_name, self.attention_class(config, layer_idx, rngs=rngs))
        self.mlp = self.mlp_class(config, rngs=rngs)
        self.arrange(config)
        attention_dropout, mlp_dropout, key = self.dropouts or (None, None, None)
        self.around = tuple(
            around._replace(dropout=dropout)
            for around, dropout in zip(
                BLOCK_NORMS[self.norms], (attention_dropout, mlp_dropout), strict=True
            )
        )
        for name in dict.fromkeys(n for a in self.around for n in (a.norm_in, a.norm_out) if n):
            setattr(self, name, config.make_norm(config.hidden_size))
        for name in dict.fromkeys(a.dropout for a in self.around if a.dropout):
            setattr(self, name, nn.Dropout(getattr(config, str(key))))
        multiplier = getattr(config, "residual_multiplier", None)
        self.residual_multiplier = None if multiplier in (None, 1, 1.0) else float(multiplier)

    def arrange(self, config: DecoderConfig) -> None:
        """Set ``norms`` or ``parallel`` where the family's config picks them (Gemma, GPT-NeoX);
        the class's otherwise."""

    def residual(self, x: jax.Array, update: jax.Array) -> jax.Array:
        """``x + update`` (times the residual multiplier)."""
        if self.residual_multiplier is not None:
            update = update * self.residual_multiplier
        return x + update

    def sublayer(
        self, around: Around, x: jax.Array, rngs: Rngs | None, module: Any, *args: Any
    ) -> jax.Array:
        """``module(x, *args)`` with the norms and the dropout ``around`` it."""
        if around.norm_in is not None:
            x = getattr(self, around.norm_in)(x)
        out = module(x, *args)
        if around.norm_out is not None:
            out = getattr(self, around.norm_out)(out)
        if around.dropout is not None:
            out = getattr(self, around.dropout)(out, rngs=rngs)
        return out

    def forward(
        self,
        hidden_states: jax.Array,
        mask: jax.Array,
        rope: tuple[jax.Array, jax.Array] | None,
        *,
        cache: KVCache | None = None,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        (attention_around, mlp_around), x = self.around, hidden_states
        attention = getattr(self, self.attention_name)
        attended = self.sublayer(attention_around, x, rngs, attention, mask, rope, cache, rngs)
        if self.parallel:  # both read the block's input
            return self.residual(x, attended + self.sublayer(mlp_around, x, rngs, self.mlp))
        x = self.residual(x, attended)
        return self.residual(x, self.sublayer(mlp_around, x, rngs, self.mlp))


# ---------------------------------------------------------------------------------------------
# Models


class DecoderModel(GradientCheckpointingMixin, PreTrainedModel):
    """A decoder without a head: token ids -> last hidden state ``[B, L, hidden]``.

    Subclasses set ``config_class``, ``layer_class`` and, where transformers names them
    otherwise, ``embed_name`` / ``layers_name`` / ``norm_name``.
    """

    config_class: ClassVar[type[PretrainedConfig]] = DecoderConfig
    base_model_prefix: ClassVar[str] = "model"
    layer_class: ClassVar[type[Any]] = DecoderLayer
    embed_name: ClassVar[str] = "embed_tokens"
    layers_name: ClassVar[str] = "layers"
    norm_name: ClassVar[str] = "norm"
    # the family's dropout over the embeddings entering the blocks, if it has one: its module
    # name (GPT-2's ``drop``) and the config key of its rate (``embd_pdrop``)
    embedding_dropout: ClassVar[tuple[str, str] | None] = None
    # the family's learned position embedding, if it has one (GPT-2's ``wpe``)
    position_embedding_name: ClassVar[str | None] = None
    # whether the embedding's ``pad_token_id`` row is its padding row (not GPT-NeoX's)
    embed_padding: ClassVar[bool] = True
    # whether ``embedding_scale`` also scales ``inputs_embeds`` (not in Gemma, whose
    # embedding module holds the scale)
    scale_given_embeds: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fix = "embedding_dropout = (its module name, the config key of its rate)"
        refuse_renamed_hooks(cls, embed_dropout_name=fix, embed_dropout_key=fix)

    def __init__(self, config: Any, *, rngs: Rngs):
        super().__init__(config)
        self.sliding_windows = tuple(config.sliding_windows())
        self.layer_ropes = tuple(config.layer_ropes())
        for kind in sorted(set(self.layer_ropes) - {None}):
            check_rope(type(config).__name__, config.rope_parameters_for(kind))
        self.build(config, rngs)
        if self.embedding_dropout is not None:
            name, key = self.embedding_dropout
            setattr(self, name, nn.Dropout(getattr(config, key)))

    def build(self, config: Any, rngs: Rngs) -> None:
        """The modules: embedding, layers, final norm (in this order: the random draws)."""
        padding = getattr(config, "pad_token_id", None) if self.embed_padding else None
        embedding = nn.Embedding(config.vocab_size, config.hidden_size, padding, rngs=rngs)
        setattr(self, self.embed_name, embedding)
        layers = [self.layer_class(config, i, rngs=rngs) for i in range(config.num_hidden_layers)]
        setattr(self, self.layers_name, nn.ModuleList(layers))
        setattr(self, self.norm_name, config.make_norm(config.hidden_size))

    @property
    def embedding(self) -> nn.Embedding:
        """The token embedding (``embed_tokens``, or the family's name for it)."""
        return getattr(self, self.embed_name)

    def _config_json(self) -> dict[str, Any]:
        return _family_json(self, causal=False)

    def cache_layout(self) -> tuple[int, int, int]:
        """``(layers, kv_heads, head_dim)`` of the key-value cache."""
        config = self.config
        return config.num_hidden_layers, config.num_key_value_heads, config.head_dim

    def make_cache(self, batch_size: int, max_length: int, *, dtype: Any = None) -> KVCache:
        """A ``js.nn.KVCache`` for this decoder: one layer per decoder layer, storing the
        key/value heads only, in ``dtype`` (default: the embedding's dtype)."""
        dtype = self.embedding.weight.value.dtype if dtype is None else dtype
        layers, heads, dim = self.cache_layout()
        return KVCache(batch_size, max_length, layers, heads, dim, dtype=dtype)

    def embed(self, input_ids: Any, inputs_embeds: Any) -> jax.Array:
        """``[B, L, hidden]``: the checked inputs embedded (times ``embedding_scale``)."""
        ids, embeds = check_tokens(type(self).__name__, input_ids, inputs_embeds)
        hidden = self.embedding(ids) if embeds is None else embeds
        scale = self.config.embedding_scale()
        if scale is not None and (embeds is None or self.scale_given_embeds):
            hidden = hidden * jnp.asarray(scale, hidden.dtype)
        return hidden

    def embed_positions(
        self,
        hidden: jax.Array,
        position_ids: jax.Array,
        added: jax.Array | None,
        *,
        rngs: Rngs | None,
    ) -> jax.Array:
        """The hidden state entering the blocks: ``hidden`` plus the learned position
        embeddings where the family has them (plus ``added``), through the embedding dropout
        where the family has one."""
        if self.position_embedding_name is not None:
            positions = getattr(self, self.position_embedding_name)(position_ids)
            hidden = hidden + positions.astype(hidden.dtype)
        hidden = hidden if added is None else hidden + added
        if self.embedding_dropout is not None:
            hidden = getattr(self, self.embedding_dropout[0])(hidden, rngs=rngs)
        return hidden

    def forward(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        inputs_embeds: jax.Array | None = None,
        *,
        cache: KVCache | None = None,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        """The last hidden state ``[B, L, hidden]`` (after the final norm).

        Args:
            input_ids: token ids ``[B, L]`` (or give ``inputs_embeds`` ``[B, L, hidden]``).
            attention_mask: ``[B, L]``, nonzero for real tokens, 0 for padding (left or
                right). None: every token is real.
            position_ids: ``[B, L]``, ``[1, L]`` or ``[L]``; default ``0..L-1`` for every row,
                as in transformers (for left padding pass e.g. ``cumsum(mask) - 1``). With
                ``config.use_cache`` false and no ``attention_mask``, positions that restart
                mark packed sequences that do not attend to each other, as transformers'
                forward does then.
            cache: a ``js.nn.KVCache`` (``make_cache``) to decode with: the tokens are stored
                after those of earlier calls and attend to them (within each layer's sliding
                window); positions continue each row's count (``position_ids`` overrides
                them). See ``js.models.generate``.
            rngs: ``js.Rngs`` with a ``dropout`` stream, for families with dropout, in
                training.
        """
        hidden = self.embed(input_ids, inputs_embeds)  # [B, L, hidden]
        return self.decode(hidden, attention_mask, position_ids, cache=cache, rngs=rngs)

    def decode(
        self,
        hidden: jax.Array,
        attention_mask: Any,
        position_ids: Any,
        *,
        cache: KVCache | None,
        rngs: Rngs | None,
        added: jax.Array | None = None,
    ) -> jax.Array:
        """Positions, masks, blocks and the final norm over embedded inputs ``[B, L, hidden]``."""
        name = type(self).__name__
        B, L = hidden.shape[:2]
        if attention_mask is not None and tuple(jnp.shape(attention_mask)) != (B, L):
            raise ValueError(
                f"{name}: attention_mask must be [B, L] = {[B, L]} (1 for real tokens, 0 for "
                f"padding), got shape {list(jnp.shape(attention_mask))}"
            )
        if cache is not None:
            position_ids = cache.begin(L, attention_mask, position_ids)  # [B, L]
        position_ids = jnp.arange(L) if position_ids is None else jnp.asarray(position_ids)
        if position_ids.shape not in ((L,), (1, L), (B, L)):
            raise ValueError(
                f"{name}: position_ids must be [B, L], [1, L] or [L] with [B, L] = {[B, L]}, "
                f"got shape {list(position_ids.shape)}"
            )
        position_ids = jnp.broadcast_to(position_ids, (B, L))
        hidden = self.embed_positions(hidden, position_ids, added, rngs=rngs)
        ropes = {
            kind: self.rope(kind, position_ids, hidden.dtype)
            for kind in set(self.layer_ropes) - {None}
        }
        # transformers looks for packed sequences only when called without a cache
        # (use_cache False, which defaults to config.use_cache)
        packed = None if getattr(self.config, "use_cache", True) else position_ids
        masks = {
            window: (
                decoder_mask(L, attention_mask, window=window, packed_positions=packed)
                if cache is None
                else cache.mask(L, window)  # [B, 1, L, max_length]
            )
            for window in set(self.sliding_windows)
        }
        checkpointed = self._checkpointed(self.training, cache)
        layers = getattr(self, self.layers_name)
        for layer, window, kind in zip(layers, self.sliding_windows, self.layer_ropes, strict=True):
            rope = ropes.get(kind)
            if checkpointed is not None:  # gradient_checkpointing_enable(): js.remat per block
                hidden = checkpointed(layer, hidden, masks[window], rope, rngs=rngs)
            else:
                hidden = layer(hidden, masks[window], rope, cache=cache, rngs=rngs)
        return getattr(self, self.norm_name)(hidden)

    def rope(self, kind: str, position_ids: jax.Array, dtype: Any) -> tuple[jax.Array, jax.Array]:
        """``(cos, sin)`` ``[B, L, rotary_dim]`` of the rotary table ``kind``."""
        config = self.config
        return rope_cos_sin(
            type(config).__name__,
            config.rope_parameters_for(kind),
            config.rotary_dim(),
            position_ids,
            dtype,
            max_position_embeddings=getattr(config, "max_position_embeddings", None),
        )


class DecoderForCausalLM(GenerationMixin, GradientCheckpointingMixin, PreTrainedModel):
    """A decoder (``base_model_class``, at ``base_model_prefix``) and the head ``lm_head``
    projecting to next-token logits ``[B, L, vocab]``.

    With ``tie_word_embeddings`` the head's weight is the embedding's (one Parameter, written
    once, as transformers does). The config's ``logits_scaling`` divides the logits (Granite)
    and ``final_logit_softcapping`` caps them (``c * tanh(logits / c)``, Gemma 2 and 3).
    """

    config_class: ClassVar[type[PretrainedConfig]] = DecoderConfig
    base_model_prefix: ClassVar[str] = "model"
    base_model_class: ClassVar[type[DecoderModel]] = DecoderModel
    head_name: ClassVar[str] = "lm_head"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        refuse_renamed_hooks(cls, head_bias="def head_bias(self) -> bool on the config class")
        step = vars(cls).get("cached_step")
        if step is not None and list(inspect.signature(step).parameters) != [
            "self",
            "inputs",
            "options",
        ]:
            raise TypeError(
                f"{cls.__name__}.cached_step: the hook now receives the forward's arguments as "
                "given. Fix: def cached_step(self, inputs, options) (bind them with "
                "inspect.signature(self.decoder.forward).bind(*inputs, **options), as Phi-3 does)"
            )
        base = cls.base_model_class  # a family names its base model; its config and file rules
        if "config_class" not in vars(cls):
            cls.config_class = base.config_class
        if "base_model_prefix" not in vars(cls):  # where the head keeps its base model
            cls.base_model_prefix = base.base_model_prefix
        for rules in ("key_mapping", "save_key_mapping", "ignore_on_load", "adapter_key_mapping"):
            if getattr(cls, rules) is getattr(PreTrainedModel, rules):  # none of the family's own
                setattr(cls, rules, getattr(base, rules))
        cls.forward = _showing_arguments(cls)

    def __init__(self, config: Any, *, rngs: Rngs):
        super().__init__(config)
        base = self.base_model_class(config, rngs=rngs)
        setattr(self, self.base_model_prefix, base)
        head = nn.Linear(config.hidden_size, config.vocab_size, bias=config.head_bias(), rngs=rngs)
        if config.tie_word_embeddings:
            head.weight = base.embedding.weight
        setattr(self, self.head_name, head)

    @property
    def decoder(self) -> DecoderModel:
        """The decoder without its head."""
        return getattr(self, self.base_model_prefix)

    def _config_json(self) -> dict[str, Any]:
        return _family_json(self, causal=True)

    def make_cache(self, batch_size: int, max_length: int, *, dtype: Any = None) -> KVCache:
        """A ``js.nn.KVCache`` for this model (see ``DecoderModel.make_cache``)."""
        return self.decoder.make_cache(batch_size, max_length, dtype=dtype)

    def forward(self, *inputs: Any, logits_to_keep: int = 0, **options: Any) -> jax.Array:
        """Logits ``[B, L, vocab]`` over the base model's last hidden state; ``inputs`` and
        ``options`` are its ``forward``'s (``DecoderModel.forward``: ``input_ids``,
        ``attention_mask``, ``position_ids``, ``inputs_embeds``, ``cache``, ``rngs``), which
        ``inspect.signature`` shows here too.

        ``logits_to_keep=n > 0`` computes the logits of the last ``n`` positions only
        (``[B, n, vocab]``), as transformers' argument does; 0 (default) computes all.
        """
        hidden = self.cached_step(inputs, options)
        if hidden is None:
            hidden = self.decoder(*inputs, **options)
        return self.logits(hidden, logits_to_keep)

    def cached_step(self, inputs: tuple[Any, ...], options: dict[str, Any]) -> jax.Array | None:
        """The last hidden state of a ``forward`` (its base model's ``inputs`` and
        ``options``) where the family computes it otherwise (Phi-3 runs a longrope sequence
        again); None: the base model's, as usual."""
        return None

    def logits(self, hidden: jax.Array, logits_to_keep: int = 0) -> jax.Array:
        """The head over the last hidden state (the last ``logits_to_keep`` positions)."""
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        logits = getattr(self, self.head_name)(hidden)
        scaling = getattr(self.config, "logits_scaling", None)
        if scaling not in (None, 1, 1.0):
            logits = logits / scaling
        cap = getattr(self.config, "final_logit_softcapping", None)
        if cap is not None:
            logits = jnp.tanh(logits / cap) * cap
        return logits


def _family_json(model: DecoderModel | DecoderForCausalLM, *, causal: bool) -> dict[str, Any]:
    """config.json's keys, ``architectures`` named after the config's family (else the
    model's class)."""
    config = model.config
    name = config.architecture(causal) if config.family else type(model).__name__
    return {**config.to_dict(), "architectures": [name]}


def _showing_arguments(cls: type[DecoderForCausalLM]) -> Any:
    """``cls.forward``, showing ``inspect`` its base model's arguments and the options the head
    adds (``logits_to_keep``, MoE's ``output_router_logits``): each class's own function."""
    forwards = {}  # each head forward's options, base class first
    for klass in reversed(cls.__mro__):
        own = vars(klass).get("forward")
        if own is not None and issubclass(klass, DecoderForCausalLM):
            forwards[own.__code__] = own
    signature = passing_signature(cls.base_model_class.forward, *forwards.values())
    forward = vars(cls).get("forward") or with_signature(cls.forward, signature)
    forward.__signature__ = signature
    return forward


DecoderForCausalLM.forward = _showing_arguments(DecoderForCausalLM)


def decoder_classes(
    config_class: type[DecoderConfig],
    model: type[M] = DecoderModel,
    head: type[H] = DecoderForCausalLM,
    *,
    head_name: str | None = None,
    **model_attributes: Any,
) -> tuple[type[M], type[H]]:
    """A family's ``{family}Model`` and ``{family}ForCausalLM`` (transformers' names), in the
    config's module: subclasses of ``model`` (with ``config_class`` and ``model_attributes``,
    e.g. ``layer_class``, module names, file rules) and of ``head`` (over the new model; its
    module named ``head_name`` where that is not ``lm_head``), for a family whose classes add
    nothing else.

    Example:
        >>> from js.models.qwen3 import Qwen3Config, Qwen3ForCausalLM
        >>> Qwen3ForCausalLM.__module__, Qwen3ForCausalLM.base_model_class.__name__
        ('js.models.qwen3', 'Qwen3Model')
    """
    family, module = config_class.family, config_class.__module__
    base = type(model)(
        f"{family}Model",
        (model,),
        {
            "__module__": module,
            "__doc__": f"The {family} decoder without a head (see ``DecoderModel.forward``).",
            "config_class": config_class,
            **model_attributes,
        },
    )
    causal = type(head)(
        f"{family}ForCausalLM",
        (head,),
        {
            "__module__": module,
            "__doc__": f"``{family}Model`` and the ``lm_head`` (see ``{head.__name__}``).",
            "base_model_class": base,
            **({} if head_name is None else {"head_name": head_name}),
        },
    )
    return base, causal
