"""CLIP (Radford et al., 2021) as transformers 5.23 builds it: ``CLIPTextModel``,
``CLIPVisionModel`` and the dual ``CLIPModel``, loading ``model_type`` ``"clip"``,
``"clip_text_model"`` and ``"clip_vision_model"`` folders. SigLIP (``siglip.py``) is built
from the same pieces.

Both towers are encoders of pre-norm "CLIP" layers (``encoder.layers.N.self_attn.q_proj``/
``k_proj``/``v_proj``/``out_proj``, ``layer_norm1``/``layer_norm2``, ``mlp.fc1``/``fc2``): the
skeleton's self-attention under CLIP's names, its MLP the decoders' ``FeedForward``.

- Text: token and position embeddings, causal self-attention that also hides padding, the
  ``final_layer_norm``; the pooled output is the state at each row's end token (the first
  ``eos_token_id``; with ``eos_token_id`` 2, as the original configs have it, the highest id).
- Vision: [CLS] (``class_embedding``), patches and positions (resized for images of another
  size with ``interpolate_pos_encoding``), ``pre_layrnorm`` (transformers' spelling) before the
  layers; the pooled output is ``post_layernorm`` of the final [CLS] state.
- ``CLIPModel``: both towers (``text_model``, ``vision_model``), their pooled outputs projected
  (``text_projection``, ``visual_projection``, no bias) and normalised, and
  ``logits_per_text = exp(logit_scale) * text @ image^T``.

A tower loads from its own folder or from a ``CLIPModel`` folder (its config's sub-config, its
weights under ``text_model.``/``vision_model.``, the rest ignored), as transformers' do. Not
ported: the contrastive loss, ``CLIPTextModelWithProjection``/``CLIPVisionModelWithProjection``,
``CLIPForImageClassification``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple, Self

import jax
import jax.numpy as jnp

from js import Module, Parameter, Rngs, nn
from js.nn.attention import decoder_mask, padding_mask

from ._base import PretrainedConfig, PreTrainedModel, architectures
from ._decoder import FeedForward
from ._encoder import Encoder, EncoderConfig, EncoderModel, EncoderSelfAttention
from ._hf import check_tokens
from ._vision import VisionPreTrainedModel, pair, patch_grid, patchify, prepend, resize_positions

__all__ = [
    "ARCHITECTURES",
    "CLIPConfig",
    "CLIPModel",
    "CLIPOutput",
    "CLIPTextConfig",
    "CLIPTextModel",
    "CLIPVisionConfig",
    "CLIPVisionModel",
]

# -- configs --------------------------------------------------------------------------------


class CLIPTowerConfig(EncoderConfig):
    """What the configs of CLIP's towers share (SigLIP's derive from them): the defaults of the
    keys both read, transformers' ``attention_dropout`` (the blocks'
    ``attention_probs_dropout_prob``), and the tower's part of a dual model's ``config.json``
    (``base_config_key``) when a tower loads from a dual model's folder. The towers' defaults
    (transformers_defaults.json) are transformers' for the keys js reads (others, such as
    ``projection_dim`` and the initialisers', are kept from the file and written back)."""

    attribute_map = {"attention_probs_dropout_prob": "attention_dropout"}
    # the tower's key in a dual config: "text_config" for clip_text_model, as transformers'
    base_config_key: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "model_type" in vars(cls):
            cls.base_config_key = cls.model_type.split("_")[-2] + "_config"

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> Self:
        """The config of a ``config.json`` mapping: the tower's own, or its part of a dual
        model's (``text_config``/``vision_config``)."""
        if config.get("model_type") != cls.model_type and cls.base_config_key in config:
            config = config[cls.base_config_key]
        return super().from_dict(config)


class CLIPTextConfig(CLIPTowerConfig):
    """A CLIP text tower's config (transformers' ``CLIPTextConfig``; its end token
    ``eos_token_id``)."""

    model_type = "clip_text_model"


class CLIPVisionConfig(CLIPTowerConfig):
    """A CLIP vision tower's config (transformers' ``CLIPVisionConfig``: ViT-B/32 at 224)."""

    model_type = "clip_vision_model"


class CLIPConfig(PretrainedConfig):
    """A dual model's ``config.json``: ``text_config`` and ``vision_config`` (dicts or configs,
    held as the towers' config classes), ``projection_dim`` and ``logit_scale_init_value``.

    Example:
        >>> config = CLIPConfig(text_config={"hidden_size": 64}, projection_dim=32)
        >>> config.text_config.hidden_size, config.vision_config.patch_size
        (64, 32)
        >>> config.to_dict()["text_config"]["model_type"]
        'clip_text_model'
    """

    model_type = "clip"
    text_config_class: ClassVar[type[CLIPTowerConfig]] = CLIPTextConfig
    vision_config_class: ClassVar[type[CLIPTowerConfig]] = CLIPVisionConfig

    def __init__(self, text_config: Any = None, vision_config: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.text_config = _tower_config(self.text_config_class, text_config)
        self.vision_config = _tower_config(self.vision_config_class, vision_config)

    def to_dict(self) -> dict[str, Any]:
        """Every key, the towers' configs as dicts, ready for ``json.dump``."""
        towers = {"text_config": self.text_config, "vision_config": self.vision_config}
        return super().to_dict() | {key: tower.to_dict() for key, tower in towers.items()}


def _tower_config(cls: type[CLIPTowerConfig], config: Any) -> Any:
    return config if isinstance(config, cls) else cls.from_dict(config or {})


# -- blocks ---------------------------------------------------------------------------------


class CLIPAttention(EncoderSelfAttention):
    """The skeleton's self-attention under CLIP's names, with its own output projection."""

    projection_names = ("q_proj", "k_proj", "v_proj", "out_proj")


class CLIPEncoderLayer(Module):
    """``x + self_attn(layer_norm1(x))``, then ``x + mlp(layer_norm2(x))`` (``mlp.fc1``/``fc2``
    with ``hidden_act``)."""

    def __init__(self, config: CLIPTowerConfig, *, rngs: Rngs):
        super().__init__()
        H = config.hidden_size
        self.self_attn = CLIPAttention(config, rngs=rngs)
        self.layer_norm1 = config.make_norm(H)
        self.mlp = FeedForward(config, rngs=rngs)  # type: ignore[arg-type]
        self.layer_norm2 = config.make_norm(H)

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        x = hidden_states + self.self_attn(self.layer_norm1(hidden_states), mask, rngs=rngs)
        return x + self.mlp(self.layer_norm2(x))


class CLIPEncoder(Encoder):
    """``num_hidden_layers`` CLIP layers in ``layers``."""

    layer_class = CLIPEncoderLayer
    layers_name = "layers"


class CLIPTextEmbeddings(Module):
    """``token_embedding(input_ids) + position_embedding(position_ids)`` (``0..L-1`` unless
    given)."""

    def __init__(self, config: CLIPTowerConfig, *, rngs: Rngs):
        super().__init__()
        H = config.hidden_size
        self.token_embedding = nn.Embedding(config.vocab_size, H, rngs=rngs)
        self.position_embedding = nn.Embedding(config.max_position_embeddings, H, rngs=rngs)

    def forward(self, input_ids: jax.Array, position_ids: jax.Array | None = None) -> jax.Array:
        if position_ids is None:
            position_ids = jnp.arange(input_ids.shape[1])[None]  # [1, L]
        return self.token_embedding(input_ids) + self.position_embedding(position_ids)


class CLIPVisionEmbeddings(Module):
    """[CLS] (``class_embedding`` ``[hidden]``) and the patches (``patch_embedding``, a strided
    convolution without bias), plus learnt positions (``position_embedding``, resized to the
    patch grid of images of another size). SigLIP's (``with_class_token`` False) have no [CLS]
    and a biased convolution."""

    with_class_token: ClassVar[bool] = True

    def __init__(self, config: CLIPTowerConfig, *, rngs: Rngs):
        super().__init__()
        D, owner, leading = config.hidden_size, config.owner(), int(self.with_class_token)
        self.patch_size = pair(owner, "patch_size", config.patch_size)
        self.grid = patch_grid(pair(owner, "image_size", config.image_size), self.patch_size)
        if leading:
            draw = jax.random.normal(rngs.next("params"), (D,))
            self.class_embedding = Parameter(draw * D**-0.5)
        size, bias = self.patch_size, not leading
        self.patch_embedding = nn.Conv2d(
            config.num_channels, D, size, stride=size, bias=bias, rngs=rngs
        )
        positions = leading + self.grid[0] * self.grid[1]
        self.position_embedding = nn.Embedding(positions, D, rngs=rngs)

    def forward(self, pixel_values: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        embeddings = patchify(self.patch_embedding, pixel_values)  # [B, N, hidden]
        if self.with_class_token:
            embeddings = prepend(self.class_embedding.value, embeddings)  # [B, 1 + N, hidden]
        grid = patch_grid(pixel_values.shape[2:], self.patch_size)  # the images' own
        table = self.position_embedding.weight.value[None]  # [1, positions, hidden]
        leading = int(self.with_class_token)  # [CLS]'s own position
        return embeddings + resize_positions(table, self.grid, grid, leading=leading)


# -- models ---------------------------------------------------------------------------------


class CLIPTower(EncoderModel):
    """What CLIP's and SigLIP's towers share: an encoder of CLIP layers, no BERT pooler, and
    the ``position_ids`` buffers of files older than transformers 4.31 ignored."""

    encoder_class = CLIPEncoder
    pooler_class = None
    ignore_on_load = (r"(^|\.)position_ids$",)


def _text_mask(config: EncoderConfig, attention_mask: Any, ids: jax.Array, *, causal: bool) -> Any:
    """The self-attention mask of the token batch ``ids`` ``[B, L]``: causal or not, without
    the padding ``attention_mask`` marks (0); ``L`` checked against the position table."""
    owner, (B, L) = config.owner(), ids.shape
    if L > config.max_position_embeddings:
        raise ValueError(
            f"{owner}: input_ids has {L} tokens, more than max_position_embeddings="
            f"{config.max_position_embeddings}. Fix: truncate the text (the tokenizer's "
            "truncation=True)"
        )
    if attention_mask is not None and jnp.shape(attention_mask) != (B, L):
        raise ValueError(
            f"{owner}: attention_mask must be [batch, seq_len] = {[B, L]} like input_ids, got "
            f"{list(jnp.shape(attention_mask))}. Fix: pass the tokenizer's attention_mask"
        )
    if causal:
        return decoder_mask(L, attention_mask)  # [B|1, 1, L, L]
    return None if attention_mask is None else padding_mask(jnp.asarray(attention_mask) != 0)


class CLIPTextModel(CLIPTower):
    """CLIP's text tower: token and position embeddings, causal CLIP layers, the
    ``final_layer_norm``; pooled at each row's end token.

    Shape:
        ``input_ids`` ``[B, L]`` -> ``(last_hidden_state [B, L, hidden], pooler_output
        [B, hidden])``.
    """

    config_class = CLIPTextConfig
    base_model_prefix = "text_model"
    embeddings_class = CLIPTextEmbeddings
    final_norm_name = "final_layer_norm"
    causal: ClassVar[bool] = True  # SigLIP's text attends both ways

    def forward(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        *,
        rngs: Rngs | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """Encode a batch of token ids.

        Args:
            input_ids: ``[B, L]`` token ids, ``L`` at most ``max_position_embeddings``.
            attention_mask: ``[B, L]``, 1 for tokens, 0 for padding (default: all tokens).
            position_ids: ``[B, L]`` or ``[1, L]`` (default ``0..L-1``).
            rngs: a ``dropout`` stream, needed in training mode with attention dropout only.

        Returns:
            ``(last_hidden_state [B, L, hidden], pooler_output)``.
        """
        ids, _ = check_tokens(self.config.owner(), input_ids, None)
        assert ids is not None  # check_tokens returns the one given
        mask = _text_mask(self.config, attention_mask, ids, causal=self.causal)
        hidden, _ = self.encode(self.embeddings(ids, position_ids), mask, rngs=rngs)
        return hidden, self.pool_text(ids, hidden)

    def pool_text(self, input_ids: jax.Array, hidden: jax.Array) -> jax.Array:
        """The final state at each row's end token ``[B, hidden]``: the first
        ``eos_token_id``, or with ``eos_token_id`` 2 the highest id, as transformers reads it."""
        eos = self.config.eos_token_id
        ends = input_ids if eos == 2 else (input_ids == eos)
        return hidden[jnp.arange(hidden.shape[0]), jnp.argmax(ends.astype(jnp.int32), axis=-1)]


class CLIPVisionPreTrainedModel(VisionPreTrainedModel):
    """What CLIP's vision models share: the config class and the prefix of their weights in a
    ``CLIPModel``'s files; images in (``VisionPreTrainedModel``)."""

    config_class = CLIPVisionConfig
    base_model_prefix = "vision_model"


class CLIPVisionModel(CLIPTower, CLIPVisionPreTrainedModel):
    """CLIP's vision tower: [CLS], patches and positions, ``pre_layrnorm``, the CLIP layers;
    pooled: ``post_layernorm`` of the final [CLS] state.

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> ``(last_hidden_state [B, 1 + N, hidden],
        pooler_output [B, hidden])``.
    """

    embeddings_class = CLIPVisionEmbeddings

    def __init__(self, config: CLIPTowerConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.pre_layrnorm = config.make_norm(config.hidden_size)
        self.post_layernorm = config.make_norm(config.hidden_size)

    def encode(
        self, hidden: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None
    ) -> tuple[jax.Array, jax.Array | None]:
        """The skeleton's ``encode`` of the embedded images after ``pre_layrnorm``."""
        return super().encode(self.pre_layrnorm(hidden), mask, rngs=rngs)

    def pool(self, hidden: jax.Array) -> jax.Array:
        """``post_layernorm`` of the final [CLS] state ``[B, hidden]``."""
        return self.post_layernorm(hidden[:, 0])


class CLIPOutput(NamedTuple):
    """What ``CLIPModel`` and ``SiglipModel`` return: transformers' ``CLIPOutput`` less the
    loss and the towers' own outputs."""

    logits_per_image: jax.Array  # [B_image, B_text]
    logits_per_text: jax.Array  # [B_text, B_image]
    text_embeds: jax.Array  # [B_text, D], unit length
    image_embeds: jax.Array  # [B_image, D], unit length


class CLIPModel(PreTrainedModel):
    """The dual encoder of a ``CLIPConfig``: ``text_model`` and ``vision_model``
    (``text_class``, ``vision_class``), then the family's head (``init_head``: CLIP's
    projections and ``logit_scale``).

    Shape:
        ``input_ids`` ``[T, L]`` and ``pixel_values`` ``[I, C, H, W]`` -> ``CLIPOutput``:
        ``logits_per_image`` ``[I, T]``, ``logits_per_text`` ``[T, I]``, ``text_embeds``
        ``[T, D]``, ``image_embeds`` ``[I, D]``.
    """

    config: CLIPConfig
    config_class = CLIPConfig
    base_model_prefix = "clip"
    ignore_on_load = CLIPTower.ignore_on_load
    text_class: ClassVar[type[CLIPTextModel]] = CLIPTextModel
    vision_class: ClassVar[type[CLIPTower]] = CLIPVisionModel

    def __init__(self, config: CLIPConfig, *, rngs: Rngs):
        super().__init__(config)
        self.text_model = self.text_class(config.text_config, rngs=rngs)
        self.vision_model = self.vision_class(config.vision_config, rngs=rngs)
        self.init_head(config, rngs)

    def init_head(self, config: CLIPConfig, rngs: Rngs) -> None:
        """CLIP's: ``text_projection`` and ``visual_projection`` to ``projection_dim`` (no
        bias), and ``logit_scale`` (a scalar, ``logit_scale_init_value``)."""
        text, vision = config.text_config.hidden_size, config.vision_config.hidden_size
        P = config.projection_dim
        self.visual_projection = nn.Linear(vision, P, bias=False, rngs=rngs)
        self.text_projection = nn.Linear(text, P, bias=False, rngs=rngs)
        self.logit_scale = Parameter(jnp.asarray(config.logit_scale_init_value, jnp.float32))

    def project(self, name: str, pooled: jax.Array) -> jax.Array:
        """A tower's pooled output through the projection ``name`` (SigLIP has none)."""
        return getattr(self, name)(pooled)

    def get_text_features(self, input_ids: jax.Array, **inputs: Any) -> jax.Array:
        """The text embeddings ``[T, D]``, not normalised: the text model's pooled output of
        ``input_ids`` (and its other ``inputs``: ``attention_mask``, ``position_ids``),
        projected (transformers 5 returns them as the ``pooler_output`` of its outputs)."""
        _, pooled = self.text_model(input_ids, **inputs)
        return self.project("text_projection", pooled)

    def get_image_features(self, pixel_values: jax.Array, **inputs: Any) -> jax.Array:
        """The image embeddings ``[I, D]``, not normalised: as ``get_text_features``, of the
        vision model (``inputs``: ``interpolate_pos_encoding``)."""
        _, pooled = self.vision_model(pixel_values, **inputs)
        return self.project("visual_projection", pooled)

    def logits(self, text_embeds: jax.Array, image_embeds: jax.Array) -> jax.Array:
        """``logits_per_text`` ``[T, I]`` of unit embeddings: ``exp(logit_scale)`` times the
        cosine similarities."""
        return text_embeds @ image_embeds.T * jnp.exp(self.logit_scale.value)

    def forward(
        self,
        input_ids: jax.Array,
        pixel_values: jax.Array,
        attention_mask: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        interpolate_pos_encoding: bool = False,
    ) -> CLIPOutput:
        """Score every text against every image (arguments as the towers take them)."""
        image = self.get_image_features(
            pixel_values, interpolate_pos_encoding=interpolate_pos_encoding
        )
        text = self.get_text_features(
            input_ids, attention_mask=attention_mask, position_ids=position_ids
        )
        image = image / jnp.linalg.norm(image, axis=-1, keepdims=True)
        text = text / jnp.linalg.norm(text, axis=-1, keepdims=True)
        per_text = self.logits(text, image)  # [T, I]
        return CLIPOutput(per_text.T, per_text, text, image)


ARCHITECTURES = architectures(CLIPModel, CLIPTextModel, CLIPVisionModel)
