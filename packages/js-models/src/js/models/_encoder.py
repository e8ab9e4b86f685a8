"""The encoder skeleton BERT and ViT are built on: transformers' BERT encoder blocks, whose
module names are also the files' keys (``encoder.layer.N.attention.self.query``,
``intermediate.dense``, ``output.dense``, ``pooler.dense``).

One set of blocks serves both arrangements; the config says which:

- post-norm (BERT): ``x = LayerNorm(x + attn(x))``, then ``LayerNorm(x + mlp(x))``, each norm
  (``LayerNorm``) inside the output block that adds the residual;
- pre-norm (ViT): ``x = x + attn(layernorm_before(x))``, then ``x + mlp(layernorm_after(x))``,
  the norms in the layer.

A family is a config and the pieces where it differs:

- ``EncoderConfig`` subclass, named as transformers names it (errors name ``BertConfig``'s model
  ``BertModel``): ``model_type``, ``defaults`` (transformers' keys; the blocks read BERT's key
  names, which a family with other names aliases through ``attribute_map``), the arrangement
  (``pre_norm``, ``self_attention_name``) and ``make_norm``.
- Blocks: ``EncoderSelfAttention`` (``query``/``key``/``value`` and js.nn's attention kernel),
  ``EncoderAttention`` (it and its ``output``), ``EncoderIntermediate``, ``EncoderOutput``,
  ``EncoderLayer``, ``Encoder`` (``layer``), ``EncoderPooler``; a family whose block differs
  subclasses it and names it in the class above (``attention_class``, ``layer_class``,
  ``encoder_class``).
- Models: ``EncoderModel`` (``embeddings_class``, the encoder, an optional final norm at
  ``final_norm_name`` and the pooler); the family's ``PreTrainedModel`` subclass of
  ``EncoderPreTrainedModel`` holds the one ``forward`` of its inputs (tokens, pixels), and a
  head model overrides ``outputs``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax

from js import Module, Rngs, nn

from ._base import PreTrainedModel
from ._hf import LabelledConfig, activation, attend, check_heads, split_heads

# ---------------------------------------------------------------------------------------------
# Config


class EncoderConfig(LabelledConfig):
    """An encoder's ``config.json`` with the hooks the blocks read; the defaults are BERT-base's
    encoder (which ViT-B shares but for dropout) in a post-norm arrangement. The blocks read
    ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``,
    ``hidden_act``, ``hidden_dropout_prob``, ``attention_probs_dropout_prob``,
    ``layer_norm_eps`` and, where the family has them, ViT's ``qkv_bias``, ``pooler_act`` and
    ``pooler_output_size`` (else BERT's choices: q/k/v biases, a tanh pooler to
    ``hidden_size``).

    Example:
        >>> import js
        >>> class PreNormConfig(EncoderConfig):
        ...     pre_norm = True
        >>> def norms(config):  # the layer's LayerNorms, by module path
        ...     layer = EncoderLayer(config, rngs=js.Rngs(params=0))
        ...     paths = {key.rsplit(".", 1)[0] for key in layer.state_dict()}
        ...     return sorted(path for path in paths if "norm" in path.lower())
        >>> small = {"hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 16}
        >>> norms(EncoderConfig(**small))
        ['attention.output.LayerNorm', 'output.LayerNorm']
        >>> norms(PreNormConfig(**small))
        ['layernorm_after', 'layernorm_before']
    """

    defaults: ClassVar[dict[str, Any]] = {
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
    }
    # The family's arrangement (not config.json keys): whether the blocks normalise their input
    # (ViT) instead of their output (BERT), and transformers' name of the self-attention in
    # each layer's ``attention`` (BERT's "self", ViT's "attention").
    pre_norm: ClassVar[bool] = False
    self_attention_name: ClassVar[str] = "self"

    def owner(self) -> str:
        """The base model's class name, which errors start with: transformers' naming
        (``BertConfig`` -> ``BertModel``)."""
        return type(self).__name__.removesuffix("Config") + "Model"

    def validate(self) -> None:
        """What the blocks cannot build, refused before any layer is made (a family adds its
        own refusals and calls this)."""
        check_heads(self.owner(), self.hidden_size, self.num_attention_heads)

    def make_norm(self, size: int) -> Module:
        """The family's norm over ``size`` features (``LayerNorm`` with ``layer_norm_eps``)."""
        return nn.LayerNorm(size, eps=self.layer_norm_eps)


# ---------------------------------------------------------------------------------------------
# Blocks


class EncoderSelfAttention(Module):
    """Multi-head self-attention: the ``query``/``key``/``value`` projections (biased unless
    ``qkv_bias`` is false) and js.nn's scaled dot-product attention, heads merged, then the
    output projection where the family's self-attention holds it.

    Shape:
        ``hidden_states`` ``[B, L, hidden]``, ``mask`` None, boolean ``[B, 1, 1, L]`` (True =
        attend) or floating (added to the scores, ``[B|1, heads|1, L, L]``) -> ``[B, L, hidden]``.
    """

    # transformers' names of the query, key and value projections and of the output projection
    # (hidden -> hidden, biased), None where the output is another block's (BERT's
    # ``attention.output.dense``); DistilBERT's are ("q_lin", "k_lin", "v_lin", "out_lin").
    projection_names: ClassVar[tuple[str, str, str, str | None]] = ("query", "key", "value", None)

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__()
        H, bias = config.hidden_size, getattr(config, "qkv_bias", True)
        self.num_attention_heads = config.num_attention_heads
        *qkv, out = self.projection_names
        for name in qkv:
            setattr(self, name, nn.Linear(H, H, bias=bias, rngs=rngs))
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        if out is not None:
            setattr(self, out, nn.Linear(H, H, rngs=rngs))

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        heads, (*qkv, out) = self.num_attention_heads, self.projection_names
        # [B, heads, L, head_dim] each
        q, k, v = (split_heads(getattr(self, name)(hidden_states), heads) for name in qkv)
        p, training = self.dropout.p, self.dropout.training
        attended = attend(q, k, v, mask, dropout=p, training=training, rngs=rngs)  # [B, L, hidden]
        return attended if out is None else getattr(self, out)(attended)


class EncoderOutput(Module):
    """``dropout(dense(x)) + residual``, then (post-norm) ``LayerNorm``: the block after the
    attention (``in_features`` hidden) and after the intermediate block (the default).

    Shape:
        ``hidden_states`` ``[B, L, in_features]``, ``input_tensor`` ``[B, L, hidden]`` ->
        ``[B, L, hidden]``.
    """

    def __init__(self, config: EncoderConfig, *, rngs: Rngs, in_features: int | None = None):
        super().__init__()
        size = config.intermediate_size if in_features is None else in_features
        self.dense = nn.Linear(size, config.hidden_size, rngs=rngs)
        # post-norm: the norm closes the block; pre-norm: the layer normalises the next input
        self.LayerNorm = None if config.pre_norm else config.make_norm(config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, hidden_states: jax.Array, input_tensor: jax.Array, *, rngs: Rngs | None = None
    ) -> jax.Array:
        hidden_states = self.dropout(self.dense(hidden_states), rngs=rngs) + input_tensor
        return hidden_states if self.LayerNorm is None else self.LayerNorm(hidden_states)


class EncoderAttention(Module):
    """Self-attention (at the config's ``self_attention_name``: ``self`` in BERT) and its
    output block (``output``, hidden -> hidden) adding ``residual``."""

    # built as self_attention_class(config, rngs=rngs), called as (hidden, mask, rngs=rngs)
    self_attention_class: ClassVar[type[Any]] = EncoderSelfAttention

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__()
        self.self_name = config.self_attention_name
        setattr(self, self.self_name, self.self_attention_class(config, rngs=rngs))
        self.output = EncoderOutput(config, rngs=rngs, in_features=config.hidden_size)

    def forward(
        self,
        hidden_states: jax.Array,
        mask: jax.Array | None,
        residual: jax.Array,
        *,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        attended = getattr(self, self.self_name)(hidden_states, mask, rngs=rngs)
        return self.output(attended, residual, rngs=rngs)


class EncoderIntermediate(Module):
    """``act(dense(x))`` with ``hidden_act``, hidden -> intermediate size."""

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size, rngs=rngs)
        self.intermediate_act_fn = activation(config.owner(), "hidden_act", config.hidden_act)

    def forward(self, hidden_states: jax.Array) -> jax.Array:
        return self.intermediate_act_fn(self.dense(hidden_states))


def _norm(norm: Module | None, x: jax.Array) -> jax.Array:
    """``norm(x)``, or ``x`` where the arrangement has no norm there."""
    return x if norm is None else norm(x)


class EncoderLayer(Module):
    """One block: attention, then the feed-forward block (``intermediate``, ``output``), each
    adding its input; post-norm (BERT) or pre-norm (ViT, ``layernorm_before``/``_after``) as the
    config's ``pre_norm`` says."""

    # built as attention_class(config, rngs=rngs), called as attention(x, mask, residual, rngs=)
    attention_class: ClassVar[type[Any]] = EncoderAttention

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__()
        self.attention = self.attention_class(config, rngs=rngs)
        self.intermediate = EncoderIntermediate(config, rngs=rngs)
        self.output = EncoderOutput(config, rngs=rngs)
        pre, H = config.pre_norm, config.hidden_size
        self.layernorm_before = config.make_norm(H) if pre else None
        self.layernorm_after = config.make_norm(H) if pre else None

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        normed = _norm(self.layernorm_before, hidden_states)
        x = self.attention(normed, mask, hidden_states, rngs=rngs)  # [B, L, hidden]
        return self.output(self.intermediate(_norm(self.layernorm_after, x)), x, rngs=rngs)


class Encoder(Module):
    """``num_hidden_layers`` layers (``layer_class``, called as ``layer(hidden, mask, rngs=)``)
    in ``layer`` (``layers_name``: CLIP's are ``layers``).

    Shape:
        ``hidden_states`` ``[B, L, hidden]`` (and the attention ``mask``) -> ``[B, L, hidden]``.
    """

    layer_class: ClassVar[type[Any]] = EncoderLayer  # a Module: layer_class(config, rngs=rngs)
    layers_name: ClassVar[str] = "layer"

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__()
        layers = [self.layer_class(config, rngs=rngs) for _ in range(config.num_hidden_layers)]
        setattr(self, self.layers_name, nn.ModuleList(layers))

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        for layer in getattr(self, self.layers_name):
            hidden_states = layer(hidden_states, mask, rngs=rngs)
        return hidden_states


class EncoderPooler(Module):
    """``act(dense(h[:, 0]))``: the first ([CLS]) position's state, to ``pooler_output_size``
    features (default ``hidden_size``), ``act`` the ``pooler_act`` (default tanh)."""

    def __init__(self, config: EncoderConfig, *, rngs: Rngs):
        super().__init__()
        size = getattr(config, "pooler_output_size", None) or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, size, rngs=rngs)
        name = getattr(config, "pooler_act", "tanh")
        self.activation = activation(config.owner(), "pooler_act", name)

    def forward(self, hidden_states: jax.Array) -> jax.Array:
        return self.activation(self.dense(hidden_states[:, 0]))  # [B, pooler_output_size]


# ---------------------------------------------------------------------------------------------
# Models


class EncoderPreTrainedModel(PreTrainedModel):
    """What every model of an encoder family shares: the config checked before anything is
    built, the base model (at ``base_model_prefix``) and the step from embedded inputs to the
    model's outputs. The family's subclass adds ``forward`` (embed its inputs, then
    ``from_embeddings``); a head model overrides ``outputs``."""

    config: EncoderConfig
    # The family's base model, which its head models build: the family's first ``EncoderModel``
    # subclass, recorded when that class is defined (``EncoderModel.__init_subclass__``).
    base_model_class: ClassVar[type[EncoderModel]]

    def __init__(self, config: EncoderConfig):
        config.validate()
        super().__init__(config)

    @property
    def base_model(self) -> EncoderModel:
        """The encoder without a head (the model itself for the base model)."""
        return getattr(self, self.base_model_prefix)

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """What ``forward`` returns from the last hidden state ``[B, L, hidden]`` and the pooled
        output: both, as a tuple (a head model returns its logits)."""
        return hidden, pooled

    def from_embeddings(
        self, hidden: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None
    ) -> Any:
        """``outputs`` of the base model's ``encode`` of the embedded inputs ``[B, L, hidden]``."""
        return self.outputs(*self.base_model.encode(hidden, mask, rngs=rngs), rngs=rngs)


class EncoderModel(EncoderPreTrainedModel):
    """The encoder without a head: ``embeddings`` (``embeddings_class``), ``encoder``
    (``encoder_class``, at ``encoder_name``), the final norm (at ``final_norm_name``, if any)
    and, with ``add_pooling_layer`` in a family that has one (``pooler_class``), ``pooler``."""

    embeddings_class: ClassVar[type[Any]]  # built as embeddings_class(config, rngs=rngs)
    # built as encoder_class(config, rngs=rngs), called as encoder(hidden, mask, rngs=rngs)
    encoder_class: ClassVar[type[Any]] = Encoder
    # where the encoder is (transformers' name): BERT's "encoder", DistilBERT's "transformer"
    encoder_name: ClassVar[str] = "encoder"
    final_norm_name: ClassVar[str | None] = None
    pooler_class: ClassVar[type[EncoderPooler] | None] = EncoderPooler  # None: no pooler (ELECTRA)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # the family's PreTrainedModel subclass, whose first EncoderModel this is
        family = next(c for c in cls.__mro__ if not issubclass(c, EncoderModel))
        if family is not EncoderPreTrainedModel and "base_model_class" not in vars(family):
            family.base_model_class = cls

    def __init__(self, config: EncoderConfig, add_pooling_layer: bool = True, *, rngs: Rngs):
        super().__init__(config)
        self.embeddings = self.embeddings_class(config, rngs=rngs)
        setattr(self, self.encoder_name, self.encoder_class(config, rngs=rngs))
        if self.final_norm_name is not None:
            setattr(self, self.final_norm_name, config.make_norm(config.hidden_size))
        pooler = self.pooler_class if add_pooling_layer else None
        self.pooler = None if pooler is None else pooler(config, rngs=rngs)

    @property
    def base_model(self) -> EncoderModel:
        """The model itself."""
        return self

    def encode(
        self, hidden: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None
    ) -> tuple[jax.Array, jax.Array | None]:
        """``(last_hidden_state [B, L, hidden], pooler_output [B, pooler_output_size] or None)`` of
        the embedded inputs ``hidden`` ``[B, L, hidden]``: the layers, then the final norm."""
        hidden = getattr(self, self.encoder_name)(hidden, mask, rngs=rngs)
        if self.final_norm_name is not None:
            hidden = getattr(self, self.final_norm_name)(hidden)
        return hidden, self.pool(hidden)

    def pool(self, hidden: jax.Array) -> jax.Array | None:
        """The pooled output of the final hidden states ``[B, L, hidden]``: ``pooler``'s (None
        without one); a family that pools otherwise (DINOv2, CLIP, SigLIP) overrides this."""
        return None if self.pooler is None else self.pooler(hidden)


__all__ = [
    "Encoder",
    "EncoderAttention",
    "EncoderConfig",
    "EncoderIntermediate",
    "EncoderLayer",
    "EncoderModel",
    "EncoderOutput",
    "EncoderPooler",
    "EncoderPreTrainedModel",
    "EncoderSelfAttention",
]
