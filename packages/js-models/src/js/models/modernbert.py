"""ModernBERT (Warner et al., 2024) as transformers 5.23 builds it, loading Hugging Face
``model_type: "modernbert"`` folders: ``ModernBertModel`` and its masked-LM, sequence and token
classification and question-answering heads.

ModernBERT keeps BERT's shape (bidirectional attention over padded batches, a head on the last
hidden state) and changes the blocks:

- no position table: rotary positions in every attention, one table per layer type
  (``rope_parameters``: ``full_attention`` 160000, ``sliding_attention`` 10000 by default;
  older files give ``global_rope_theta``/``local_rope_theta``);
- pre-norm layers (``attn_norm``, the identity in layer 0, and ``mlp_norm``), a fused ``Wqkv``,
  a GeGLU MLP (``Wi`` to twice ``intermediate_size``, ``act(input) * gate``, ``Wo``) and
  ``final_norm``; no biases and bias-free LayerNorms by default (``attention_bias``,
  ``mlp_bias``, ``norm_bias``);
- global attention every ``global_attn_every_n_layers`` layers (``layer_types``), the others
  attending to keys at most ``local_attention // 2`` tokens away.

``forward`` is BERT's (``BertPreTrainedModel.forward``): ``token_type_ids`` are refused (none
in ModernBERT), and so are ``position_ids``: the rotary positions are ``0..L-1``, transformers'
default.

transformers 5.23 no longer unpads: it runs the padded batch with a mask, as js does, so padded
positions get outputs on both sides; a padded query whose window holds no real token attends
to nothing and gets zeros from attention on both sides (PyTorch's safe softmax and js's).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from js import Module, Rngs, nn
from js.nn import functional as F
from js.nn.attention import causal_mask

from . import _encoder_heads as heads
from ._base import architectures
from ._encoder import EncoderConfig, EncoderModel
from ._hf import activation, attend, split_heads
from ._rope import check_rope, rope_cos_sin, standard_rope_parameters
from ._text_embeddings import TextEmbeddings
from .bert import BertPreTrainedModel

__all__ = [
    "ARCHITECTURES",
    "ModernBertConfig",
    "ModernBertForMaskedLM",
    "ModernBertForQuestionAnswering",
    "ModernBertForSequenceClassification",
    "ModernBertForTokenClassification",
    "ModernBertModel",
    "ModernBertPreTrainedModel",
]

LAYER_TYPES = ("full_attention", "sliding_attention")
# the older config keys of each layer type's rope_theta, and transformers' defaults
_THETAS = {
    "full_attention": ("global_rope_theta", 160_000.0),
    "sliding_attention": ("local_rope_theta", 10_000.0),
}


class ModernBertConfig(EncoderConfig):
    """A ModernBERT ``config.json``: transformers' ``ModernBertConfig`` keys and defaults
    (ModernBERT-base). ``layer_types`` defaults to global attention every
    ``global_attn_every_n_layers`` (3) layers from the first, sliding elsewhere.

    Example:
        >>> config = ModernBertConfig(num_hidden_layers=4, global_attn_every_n_layers=2)
        >>> config.layer_types[:2], config.rope_parameters["full_attention"]["rope_theta"]
        (['full_attention', 'sliding_attention'], 160000.0)
    """

    model_type = "modernbert"
    # the skeleton's names for ModernBERT's keys (the embeddings read the first two)
    attribute_map = {
        "hidden_dropout_prob": "embedding_dropout",
        "hidden_act": "hidden_activation",
        "attention_probs_dropout_prob": "attention_dropout",
    }
    # the keys js reads (transformers' other keys, e.g. the special tokens', are kept as given)

    def __init__(self, **kwargs: Any):
        rope = _layer_type_ropes(kwargs)  # takes the older rotary keys out of kwargs
        super().__init__(**kwargs)
        self.rope_parameters = rope
        if self.layer_types is None:  # transformers' default (global_attn_every_n_layers is kept)
            every = kwargs.get("global_attn_every_n_layers", 3)
            self.layer_types = [
                "sliding_attention" if i % every else "full_attention"
                for i in range(self.num_hidden_layers)
            ]

    def validate(self) -> None:
        """What this port cannot build, refused before any layer is made."""
        kinds = list(self.layer_types)
        if len(kinds) < self.num_hidden_layers or not set(kinds) <= set(LAYER_TYPES):
            raise ValueError(
                f"ModernBertModel: layer_types must name {self.num_hidden_layers} layers, each "
                f"one of {LAYER_TYPES}, got {kinds}. Fix: correct layer_types in config.json"
            )
        if self.classifier_pooling not in ("cls", "mean"):
            raise ValueError(
                f"ModernBertModel: classifier_pooling must be 'cls' or 'mean', got "
                f"{self.classifier_pooling!r}. Fix: set it in config.json"
            )
        for rope in self.rope_parameters.values():
            check_rope("ModernBertModel", rope)
        super().validate()

    def make_norm(self, size: int) -> Module:
        """``LayerNorm`` with ``norm_eps``, biased only with ``norm_bias``."""
        return nn.LayerNorm(size, eps=self.norm_eps, bias=self.norm_bias)


def _layer_type_ropes(kwargs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """transformers' ``ModernBertConfig.convert_rope_params_to_dict``: each layer type's table
    of ``rope_parameters`` (else the default type), ``rope_scaling`` applied to both, the
    theta from the older key (else the default), completed as transformers 5 does."""
    scaling = kwargs.pop("rope_scaling", None) or {}
    tables = kwargs.get("rope_parameters") or {}
    context = kwargs.get("max_position_embeddings", 8192)
    return {
        kind: standard_rope_parameters(
            {
                "rope_parameters": {**(tables.get(kind) or {}), **scaling},
                "rope_theta": kwargs.pop(key, theta),
                "max_position_embeddings": context,
            }
        )
        for kind, (key, theta) in _THETAS.items()
    }


class ModernBertInputs(NamedTuple):
    """What ModernBERT's layers read, by layer type: the key mask (None, or boolean
    ``[B|1, 1, L|1, L]``) and the rotary ``(cos, sin)`` ``[1, L, head_dim]``."""

    masks: dict[str, jax.Array | None]
    rotary: dict[str, tuple[jax.Array, jax.Array]]


class ModernBertEmbeddings(TextEmbeddings):
    """``drop(norm(tok_embeddings(ids)))`` (``embedding_dropout``): no position table, the
    positions are rotary."""

    names = ("tok_embeddings", None, "norm", "drop")


class ModernBertAttention(Module):
    """``Wo`` of the attention of rotated ``Wqkv`` queries and keys (js.nn's kernel, scale
    ``head_dim ** -0.5``), then ``out_drop`` (``attention_dropout``, also the weights'), with
    the mask and rotary table of the layer's ``attention_type``."""

    def __init__(self, config: ModernBertConfig, attention_type: str, *, rngs: Rngs):
        super().__init__()
        H, bias = config.hidden_size, config.attention_bias
        self.num_attention_heads, self.attention_type = config.num_attention_heads, attention_type
        self.Wqkv = nn.Linear(H, 3 * H, bias=bias, rngs=rngs)
        self.Wo = nn.Linear(H, H, bias=bias, rngs=rngs)
        self.out_drop = nn.Dropout(config.attention_dropout)

    def forward(
        self, hidden_states: jax.Array, inputs: ModernBertInputs, *, rngs: Rngs | None = None
    ) -> jax.Array:
        qkv = split_heads(self.Wqkv(hidden_states), 3 * self.num_attention_heads)
        q, k, v = jnp.split(qkv, 3, axis=1)  # [B, heads, L, head_dim] each
        rotary = inputs.rotary[self.attention_type]
        q, k = (F.apply_rotary_pos_emb(x, *rotary) for x in (q, k))
        mask, p, training = (
            inputs.masks[self.attention_type],
            self.out_drop.p,
            self.out_drop.training,
        )
        attended = attend(q, k, v, mask, dropout=p, training=training, rngs=rngs)  # [B, L, H]
        return self.out_drop(self.Wo(attended), rngs=rngs)


class ModernBertMLP(Module):
    """GeGLU: ``Wo(drop(act(input) * gate))``, ``input, gate = Wi(x)`` halves (``Wi`` hidden ->
    2 * ``intermediate_size``)."""

    def __init__(self, config: ModernBertConfig, *, rngs: Rngs):
        super().__init__()
        H, inner, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.Wi = nn.Linear(H, 2 * inner, bias=bias, rngs=rngs)
        self.act = activation(config.owner(), "hidden_activation", config.hidden_activation)
        self.drop = nn.Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(inner, H, bias=bias, rngs=rngs)

    def forward(self, hidden_states: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        projected, gate = jnp.split(self.Wi(hidden_states), 2, axis=-1)  # [B, L, inner] each
        return self.Wo(self.drop(self.act(projected) * gate, rngs=rngs))


class ModernBertEncoderLayer(Module):
    """``x + attn(attn_norm(x))``, then ``x + mlp(mlp_norm(x))``; ``attn_norm`` is the identity
    in layer 0 (the embeddings end with a norm)."""

    def __init__(self, config: ModernBertConfig, layer_idx: int, *, rngs: Rngs):
        super().__init__()
        H, kind = config.hidden_size, config.layer_types[layer_idx]
        self.attn_norm = nn.Identity() if layer_idx == 0 else config.make_norm(H)
        self.attn = ModernBertAttention(config, kind, rngs=rngs)
        self.mlp_norm = config.make_norm(H)
        self.mlp = ModernBertMLP(config, rngs=rngs)

    def forward(
        self, hidden_states: jax.Array, inputs: ModernBertInputs, *, rngs: Rngs | None = None
    ) -> jax.Array:
        hidden_states = hidden_states + self.attn(self.attn_norm(hidden_states), inputs, rngs=rngs)
        return hidden_states + self.mlp(self.mlp_norm(hidden_states), rngs=rngs)


class ModernBertLayers(nn.ModuleList):
    """transformers' ``layers`` (on the model itself, so this list is the encoder): the
    ``num_hidden_layers`` layers, run in turn on the padding mask's ``ModernBertInputs``.

    Shape:
        ``hidden_states`` ``[B, L, H]``, ``mask`` None or boolean ``[B, 1, 1, L]`` ->
        ``[B, L, H]``.
    """

    def __init__(self, config: ModernBertConfig, *, rngs: Rngs):
        layers = range(config.num_hidden_layers)
        super().__init__([ModernBertEncoderLayer(config, i, rngs=rngs) for i in layers])
        self.config = config

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        inputs = self.inputs(mask, hidden_states.shape[1])
        for layer in self:
            hidden_states = layer(hidden_states, inputs, rngs=rngs)
        return hidden_states

    def inputs(self, mask: jax.Array | None, length: int) -> ModernBertInputs:
        """Each layer type's key mask (sliding layers: keys at most ``local_attention // 2``
        tokens away, transformers' bidirectional sliding window) and rotary table of the
        positions ``0..L-1``."""
        config = self.config
        band = causal_mask(length, window=config.local_attention // 2 + 1)  # [1, 1, L, L]
        near = band | band.swapaxes(-1, -2)  # |query - key| <= local_attention // 2
        masks = {"full_attention": mask, "sliding_attention": near if mask is None else near & mask}
        positions, head_dim = (
            jnp.arange(length)[None],
            config.hidden_size // config.num_attention_heads,
        )
        rotary = {
            kind: rope_cos_sin(
                config.owner(),
                rope,
                head_dim,
                positions,
                jnp.float32,
                max_position_embeddings=config.max_position_embeddings,
            )
            for kind, rope in config.rope_parameters.items()
        }
        return ModernBertInputs(masks, rotary)


class ModernBertPreTrainedModel(BertPreTrainedModel):
    """What every ModernBERT model shares: BERT's ``forward`` (``token_type_ids`` and
    ``position_ids`` refused) and file rules, ModernBERT's config and prefix (``model``)."""

    config_class = ModernBertConfig
    base_model_prefix = "model"


class ModernBertModel(EncoderModel, ModernBertPreTrainedModel):
    """The ModernBERT encoder: ``embeddings``, ``layers`` and ``final_norm``; no pooler (the
    pooled output is None)."""

    embeddings_class = ModernBertEmbeddings
    encoder_class = ModernBertLayers
    encoder_name = "layers"
    final_norm_name = "final_norm"
    pooler_class = None


class ModernBertPredictionHead(Module):
    """``norm(act(dense(x)))``, hidden -> hidden: ``dense`` biased with ``classifier_bias``,
    ``classifier_activation``.

    Shape:
        ``[..., H]`` -> ``[..., H]``.
    """

    def __init__(self, config: ModernBertConfig, *, rngs: Rngs):
        super().__init__()
        H, act = config.hidden_size, config.classifier_activation
        self.dense = nn.Linear(H, H, bias=config.classifier_bias, rngs=rngs)
        self.act = activation(config.owner(), "classifier_activation", act)
        self.norm = config.make_norm(H)

    def forward(self, hidden_states: jax.Array) -> jax.Array:
        return self.norm(self.act(self.dense(hidden_states)))


class ModernBertForMaskedLM(heads.EncoderHeadModel, ModernBertPreTrainedModel):
    """ModernBERT with ``head`` and ``decoder`` to the vocabulary (biased with
    ``decoder_bias``; its weight the token embeddings' with ``tie_word_embeddings``): logits
    ``[B, L, vocab_size]``."""

    def __init__(self, config: ModernBertConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        H, vocab = config.hidden_size, config.vocab_size
        self.head = ModernBertPredictionHead(config, rngs=rngs)
        self.decoder = nn.Linear(H, vocab, bias=config.decoder_bias, rngs=rngs)
        if config.tie_word_embeddings:
            self.decoder.weight = self.base_model.embeddings.tok_embeddings.weight

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The logits ``[B, L, vocab_size]``."""
        return self.decoder(self.head(hidden))


class ModernBertClassifierModel(heads.EncoderHeadModel):
    """ModernBERT's classifiers: ``head``, ``drop`` (``classifier_dropout``) and a linear
    ``classifier`` to ``num_labels`` (``classify``)."""

    def __init__(self, config: ModernBertConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.head = ModernBertPredictionHead(config, rngs=rngs)
        self.drop = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels, rngs=rngs)

    def classify(self, hidden: jax.Array, *, rngs: Rngs | None) -> jax.Array:
        """``classifier(drop(head(hidden)))``: ``[..., H]`` -> ``[..., num_labels]``."""
        return self.classifier(self.drop(self.head(hidden), rngs=rngs))


class ModernBertForSequenceClassification(ModernBertClassifierModel, ModernBertPreTrainedModel):
    """ModernBERT classifying the first token's state (``classifier_pooling`` "cls") or the
    mean of the real tokens' ("mean"): logits ``[B, num_labels]``."""

    def from_embeddings(
        self, hidden: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None
    ) -> Any:
        """The logits of the pooled last hidden state (the mean needs the padding mask)."""
        hidden, _ = self.base_model.encode(hidden, mask, rngs=rngs)  # [B, L, H]
        if self.config.classifier_pooling == "cls":
            return self.classify(hidden[:, 0], rngs=rngs)
        # the real tokens [B, L] (the padding mask is [B, 1, 1, L], None for every token)
        valid = jnp.ones(hidden.shape[:2]) if mask is None else mask[:, 0, 0].astype(hidden.dtype)
        mean = (hidden * valid[..., None]).sum(1) / valid.sum(1, keepdims=True)  # [B, H]
        return self.classify(mean, rngs=rngs)


class ModernBertForTokenClassification(ModernBertClassifierModel, ModernBertPreTrainedModel):
    """ModernBERT classifying every token: logits ``[B, L, num_labels]``."""

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The logits ``[B, L, num_labels]``."""
        return self.classify(hidden, rngs=rngs)


class ModernBertForQuestionAnswering(ModernBertClassifierModel, ModernBertPreTrainedModel):
    """ModernBERT with the classifier on every token (``num_labels`` 2): ``(start_logits,
    end_logits)``, each ``[B, L]``."""

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """``(start_logits, end_logits)``; as in transformers, only 2 labels unpack."""
        start_logits, end_logits = jnp.moveaxis(self.classify(hidden, rngs=rngs), -1, 0)
        return start_logits, end_logits


ARCHITECTURES = architectures(
    ModernBertModel,
    ModernBertForMaskedLM,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    ModernBertForQuestionAnswering,
)
