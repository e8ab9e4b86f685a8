"""DINOv2 (Oquab et al., 2023) as transformers 5.23 builds it: ``Dinov2Model`` and
``Dinov2ForImageClassification``, and DINOv2 with registers (Darcet et al., 2023:
``Dinov2WithRegistersModel`` and its classifier), loading ``model_type`` ``"dinov2"`` and
``"dinov2_with_registers"`` folders.

A DINOv2 is a pre-norm ViT (its patch embeddings, [CLS] token, positions and attention blocks,
named as the files name them: ``encoder.layer.N.attention.attention.query``) whose layers scale
each branch before its residual (``layer_scale1``/``layer_scale2``, ``lambda1``), with norms
``norm1``/``norm2``, the MLP ``mlp.fc1``/``fc2`` of ``hidden_size * mlp_ratio`` features or,
with ``use_swiglu_ffn``, SwiGLU (``mlp.weights_in``/``weights_out``). transformers 5 renames
these modules on load and back on save (``q_proj``, ``gate_proj``/``up_proj``); js keeps the
files' names. The positions are always resized to the images' patch grid (bicubic, as
transformers'; with registers also antialiased). The pooled output is the final [CLS] state;
the classifier reads it beside the mean of the patch states.

Not ported: ``bool_masked_pos`` (``mask_token`` is loaded and saved, not used), the backbone
(``Dinov2Backbone``) and stochastic depth (``drop_path_rate``, training only).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from js import Module, Parameter, Rngs, nn
from js.nn import functional as F

from ._base import architectures
from ._decoder import FeedForward
from ._encoder import Encoder, EncoderAttention, EncoderModel
from ._encoder_heads import EncoderHeadModel
from ._vision import VisionPreTrainedModel
from .vit import ViTConfig, ViTEmbeddings

__all__ = [
    "ARCHITECTURES",
    "Dinov2Config",
    "Dinov2ForImageClassification",
    "Dinov2Model",
    "Dinov2WithRegistersConfig",
    "Dinov2WithRegistersForImageClassification",
    "Dinov2WithRegistersModel",
]


class Dinov2Config(ViTConfig):
    """A DINOv2 ``config.json`` (transformers' ``Dinov2Config``: ViT-B/14 at 224): ViT's keys,
    with ``mlp_ratio`` instead of ``intermediate_size``, ``layerscale_value``,
    ``use_swiglu_ffn`` and ``use_mask_token``, and no pooler keys (the backbone's keys and
    ``drop_path_rate``, which js does not read, are kept from the file)."""

    model_type = "dinov2"

    @property
    def intermediate_size(self) -> int:
        """The MLP's features, ``int(hidden_size * mlp_ratio)`` (not a key of the file)."""
        return int(self.hidden_size * self.mlp_ratio)


class Dinov2WithRegistersConfig(Dinov2Config):
    """DINOv2 with registers: ``num_register_tokens`` more learnt tokens after [CLS]; its mask
    token is always there (no ``use_mask_token``)."""

    model_type = "dinov2_with_registers"


class Dinov2Embeddings(ViTEmbeddings):
    """ViT's embeddings (positions resized to any patch grid) and ``mask_token`` ``[1, hidden]``
    (with ``use_mask_token``; zeros, unused here)."""

    def __init__(self, config: Dinov2Config, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        use_mask = getattr(config, "use_mask_token", True)
        self.mask_token = Parameter(jnp.zeros((1, config.hidden_size))) if use_mask else None


class Dinov2WithRegistersEmbeddings(Dinov2Embeddings):
    """DINOv2's embeddings with ``register_tokens`` ``[1, R, hidden]`` (zeros) after [CLS],
    which take no position; the positions are resized antialiased."""

    antialias = True

    def __init__(self, config: Dinov2WithRegistersConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        shape = (1, config.num_register_tokens, config.hidden_size)
        self.register_tokens = Parameter(jnp.zeros(shape))

    def forward(self, pixel_values: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        # transformers drops out after the registers join; dropout is 0 in DINOv2's configs
        embeddings = super().forward(pixel_values, rngs=rngs)  # [B, 1 + N, hidden]
        registers = self.register_tokens.value  # [1, R, hidden]
        registers = jnp.broadcast_to(registers, (embeddings.shape[0], *registers.shape[1:]))
        return jnp.concatenate([embeddings[:, :1], registers, embeddings[:, 1:]], axis=1)


class Dinov2LayerScale(Module):
    """``x * lambda1``: a learnt scale per feature (``lambda1`` ``[hidden]``, initialised to
    ``layerscale_value``)."""

    def __init__(self, config: Dinov2Config):
        super().__init__()
        self.lambda1 = Parameter(jnp.full((config.hidden_size,), config.layerscale_value))

    def forward(self, x: jax.Array) -> jax.Array:
        return x * self.lambda1.value


class Dinov2SwiGLUFFN(Module):
    """``weights_out(silu(x1) * x2)``, ``x1, x2`` the halves of ``weights_in(x)``: two thirds of
    ``intermediate_size`` features each, rounded up to a multiple of 8."""

    def __init__(self, config: Dinov2Config, *, rngs: Rngs):
        super().__init__()
        H, inner = config.hidden_size, (int(config.intermediate_size * 2 / 3) + 7) // 8 * 8
        self.weights_in = nn.Linear(H, 2 * inner, rngs=rngs)
        self.weights_out = nn.Linear(inner, H, rngs=rngs)

    def forward(self, x: jax.Array) -> jax.Array:
        x1, x2 = jnp.split(self.weights_in(x), 2, axis=-1)
        return self.weights_out(F.silu(x1) * x2)


class Dinov2Layer(Module):
    """``x + layer_scale1(attention(norm1(x)))``, then ``x + layer_scale2(mlp(norm2(x)))``."""

    def __init__(self, config: Dinov2Config, *, rngs: Rngs):
        super().__init__()
        H = config.hidden_size
        self.norm1 = config.make_norm(H)
        self.attention = EncoderAttention(config, rngs=rngs)
        self.layer_scale1 = Dinov2LayerScale(config)
        self.norm2 = config.make_norm(H)
        mlp = Dinov2SwiGLUFFN if config.use_swiglu_ffn else FeedForward
        self.mlp = mlp(config, rngs=rngs)  # type: ignore[arg-type]
        self.layer_scale2 = Dinov2LayerScale(config)

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        # the scale comes before the residual, so the attention block adds none (zero)
        zero = jnp.zeros((), hidden_states.dtype)
        attended = self.attention(self.norm1(hidden_states), mask, zero, rngs=rngs)
        x = hidden_states + self.layer_scale1(attended)
        return x + self.layer_scale2(self.mlp(self.norm2(x)))


class Dinov2Encoder(Encoder):
    """``num_hidden_layers`` DINOv2 layers in ``layer``."""

    layer_class = Dinov2Layer


class Dinov2PreTrainedModel(VisionPreTrainedModel):
    """What every DINOv2 model shares: its config class and prefix; images of any size."""

    config_class = Dinov2Config
    base_model_prefix = "dinov2"
    always_interpolate = True


class Dinov2Model(EncoderModel, Dinov2PreTrainedModel):
    """The DINOv2 encoder: embeddings, ``num_hidden_layers`` layers, the final ``layernorm``;
    the pooled output is the final [CLS] state.

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> ``(last_hidden_state [B, 1 + R + N, hidden],
        pooler_output [B, hidden])``, ``R`` registers, ``N`` patches.
    """

    embeddings_class = Dinov2Embeddings
    encoder_class = Dinov2Encoder
    final_norm_name = "layernorm"
    pooler_class = None

    def pool(self, hidden: jax.Array) -> jax.Array:
        """The final [CLS] state ``[B, hidden]``."""
        return hidden[:, 0]


class Dinov2ForImageClassification(EncoderHeadModel, Dinov2PreTrainedModel):
    """DINOv2 and a linear ``classifier`` of the final [CLS] state beside the mean of the
    patch states (``2 * hidden`` features; the identity with ``num_labels=0``).

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> logits ``[B, num_labels]``.
    """

    def __init__(self, config: Dinov2Config, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        n = config.num_labels
        self.classifier = nn.Linear(2 * config.hidden_size, n, rngs=rngs) if n else nn.Identity()

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The logits ``[B, num_labels]`` of [CLS] and the mean patch (registers left out)."""
        patches = hidden[:, 1 + getattr(self.config, "num_register_tokens", 0) :]
        return self.classifier(jnp.concatenate([hidden[:, 0], patches.mean(axis=1)], axis=-1))


class Dinov2WithRegistersPreTrainedModel(Dinov2PreTrainedModel):
    """What every model of DINOv2 with registers shares: its config class and prefix."""

    config_class = Dinov2WithRegistersConfig
    base_model_prefix = "dinov2_with_registers"


class Dinov2WithRegistersModel(Dinov2Model, Dinov2WithRegistersPreTrainedModel):
    """``Dinov2Model`` with register tokens after [CLS]."""

    embeddings_class = Dinov2WithRegistersEmbeddings


class Dinov2WithRegistersForImageClassification(
    Dinov2ForImageClassification, Dinov2WithRegistersPreTrainedModel
):
    """``Dinov2ForImageClassification`` over ``Dinov2WithRegistersModel``."""


ARCHITECTURES = architectures(
    Dinov2Model,
    Dinov2ForImageClassification,
    Dinov2WithRegistersModel,
    Dinov2WithRegistersForImageClassification,
)
