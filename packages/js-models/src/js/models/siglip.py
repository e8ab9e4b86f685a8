"""SigLIP (Zhai et al., 2023) as transformers 5.23 builds it: ``SiglipTextModel``,
``SiglipVisionModel`` and the dual ``SiglipModel``, loading ``model_type`` ``"siglip"``,
``"siglip_text_model"`` and ``"siglip_vision_model"`` folders.

SigLIP is CLIP (``clip.py``) with these differences, under the same module names:

- text: attention both ways (padding hidden), the pooled output ``head`` (a linear layer to
  ``projection_size``) of the final state at the last position;
- vision: no [CLS], a biased patch convolution, the final norm ``post_layernorm`` over every
  position, and (with ``vision_use_head``) the pooled output of an attention-pooling ``head``:
  a learnt ``probe`` attends over the states (``attention``, PyTorch's
  ``nn.MultiheadAttention``), then ``x + mlp(layernorm(x))``;
- ``SiglipModel``: no projections (the towers' heads are the embeddings), and a sigmoid rather
  than softmax model of the pairs: ``logits_per_text = exp(logit_scale) * text @ image^T +
  logit_bias`` (``sigmoid`` of it is each pair's probability).

Not ported: the sigmoid loss and ``SiglipForImageClassification``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from js import Module, Parameter, Rngs, nn

from ._base import architectures
from ._decoder import FeedForward
from .clip import (
    CLIPConfig,
    CLIPModel,
    CLIPTextConfig,
    CLIPTextModel,
    CLIPTower,
    CLIPTowerConfig,
    CLIPVisionConfig,
    CLIPVisionEmbeddings,
    CLIPVisionPreTrainedModel,
)

__all__ = [
    "ARCHITECTURES",
    "SiglipConfig",
    "SiglipModel",
    "SiglipTextConfig",
    "SiglipTextModel",
    "SiglipVisionConfig",
    "SiglipVisionModel",
]


class SiglipTextConfig(CLIPTextConfig):
    """A SigLIP text tower's config (transformers' ``SiglipTextConfig``; ``projection_size``
    None means ``hidden_size``)."""

    model_type = "siglip_text_model"
    # BERT-base's sizes (the tower config's), not CLIP's text tower's; pools the last token


class SiglipVisionConfig(CLIPVisionConfig):
    """A SigLIP vision tower's config (transformers' ``SiglipVisionConfig``: B/16 at 224, with
    the attention-pooling head)."""

    model_type = "siglip_vision_model"


class SiglipConfig(CLIPConfig):
    """A SigLIP ``config.json``: ``text_config`` and ``vision_config`` (no projection keys)."""

    model_type = "siglip"
    text_config_class = SiglipTextConfig
    vision_config_class = SiglipVisionConfig


class SiglipTextModel(CLIPTextModel):
    """SigLIP's text tower: CLIP's, attending both ways; its pooled output ``[B,
    projection_size]`` is ``head`` of the final state at the last position."""

    config_class = SiglipTextConfig
    causal = False

    def __init__(self, config: CLIPTowerConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        H = config.hidden_size
        self.head = nn.Linear(H, config.projection_size or H, rngs=rngs)

    def pool_text(self, input_ids: jax.Array, hidden: jax.Array) -> jax.Array:
        """``head`` of the final state at the last position (padding or not) ``[B, P]``."""
        return self.head(hidden[:, -1])


class SiglipVisionEmbeddings(CLIPVisionEmbeddings):
    """The patches (``patch_embedding``, biased) plus positions (``position_embedding``)."""

    with_class_token = False


class SiglipMultiheadAttentionPoolingHead(Module):
    """Attention pooling: the learnt ``probe`` ``[1, 1, hidden]`` attends over the states
    (``attention``, PyTorch's ``nn.MultiheadAttention``: ``in_proj_weight``, ``out_proj``),
    then ``x + mlp(layernorm(x))``.

    Shape:
        ``hidden_state`` ``[B, N, hidden]`` -> ``[B, hidden]``.
    """

    def __init__(self, config: CLIPTowerConfig, *, rngs: Rngs):
        super().__init__()
        H = config.hidden_size
        self.probe = Parameter(jax.random.normal(rngs.next("params"), (1, 1, H)))
        self.attention = nn.MultiheadAttention(H, config.num_attention_heads, rngs=rngs)
        self.layernorm = config.make_norm(H)
        self.mlp = FeedForward(config, rngs=rngs)  # type: ignore[arg-type]

    def forward(self, hidden_state: jax.Array) -> jax.Array:
        probe = self.probe.value
        probe = jnp.broadcast_to(probe, (hidden_state.shape[0], *probe.shape[1:]))  # [B, 1, H]
        x = self.attention(probe, hidden_state, hidden_state)  # [B, 1, hidden]
        return (x + self.mlp(self.layernorm(x)))[:, 0]


class SiglipVisionPreTrainedModel(CLIPVisionPreTrainedModel):
    """What SigLIP's vision models share: CLIP's, with SigLIP's config."""

    config_class = SiglipVisionConfig


class SiglipVisionModel(CLIPTower, SiglipVisionPreTrainedModel):
    """SigLIP's vision tower: patches and positions, the CLIP layers, ``post_layernorm``;
    pooled: the attention-pooling ``head`` (None without ``vision_use_head``).

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> ``(last_hidden_state [B, N, hidden],
        pooler_output [B, hidden] or None)``.
    """

    embeddings_class = SiglipVisionEmbeddings
    final_norm_name = "post_layernorm"

    def __init__(self, config: CLIPTowerConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        use_head = getattr(config, "vision_use_head", True)
        self.head = SiglipMultiheadAttentionPoolingHead(config, rngs=rngs) if use_head else None

    def pool(self, hidden: jax.Array) -> jax.Array | None:
        """The attention-pooling ``head`` of the final states ``[B, hidden]``, or None."""
        return None if self.head is None else self.head(hidden)


class SiglipModel(CLIPModel):
    """SigLIP's dual encoder: ``text_model`` and ``vision_model``, ``logit_scale`` and
    ``logit_bias`` (``[1]`` each); ``forward`` as ``CLIPModel``'s (``CLIPOutput``), its logits
    those of a sigmoid per pair."""

    config_class = SiglipConfig
    text_class = SiglipTextModel
    vision_class = SiglipVisionModel

    def init_head(self, config: CLIPConfig, rngs: Rngs) -> None:
        """``logit_scale`` and ``logit_bias``, ``[1]`` each (``N(0, 1)``, as transformers)."""
        self.logit_scale = Parameter(jax.random.normal(rngs.next("params"), (1,)))
        self.logit_bias = Parameter(jax.random.normal(rngs.next("params"), (1,)))

    def project(self, name: str, pooled: jax.Array) -> jax.Array:
        """The pooled output itself: SigLIP's towers end in their heads."""
        return pooled

    def logits(self, text_embeds: jax.Array, image_embeds: jax.Array) -> jax.Array:
        """CLIP's ``logits_per_text`` ``[T, I]`` plus ``logit_bias``."""
        return super().logits(text_embeds, image_embeds) + self.logit_bias.value


ARCHITECTURES = architectures(SiglipModel, SiglipTextModel, SiglipVisionModel)
