"""Gemma, Gemma 2 and Gemma 3 (text), as in transformers 5.23, on the decoder skeleton.

Module names are transformers' (``model.layers.N.self_attn.q_proj``, ``model.norm``,
``lm_head``), so a Hugging Face folder's weights load without renaming. Where the families
differ from Llama:

- Gemma: RMSNorm ``x * (1 + weight)`` in float32 (weights start at zero), token embeddings
  times ``sqrt(hidden_size)`` (in their dtype; ``inputs_embeds`` enter as given), GeGLU with the
  tanh GELU (``hidden_act``; the hub's legacy "gelu" means it too), ``head_dim`` from the
  config, tied embeddings by default.
- Gemma 2: each sublayer's output normed too (``post_attention_layernorm``,
  ``pre_feedforward_layernorm``, ``post_feedforward_layernorm``), ``hidden_activation``,
  sliding-window layers alternating with global ones (``layer_types``), scores scaled by
  ``query_pre_attn_scalar ** -0.5`` and soft-capped (``attn_logit_softcapping``), logits
  soft-capped (``final_logit_softcapping``).
- Gemma 3: Gemma 2's blocks with per-head q/k norms, 5 local layers to 1 global
  (``sliding_window_pattern``), one rotary table per layer type (``rope_parameters``
  ``{"sliding_attention": {...}, "full_attention": {...}}``, or the older ``rope_theta`` +
  ``rope_local_base_freq`` + ``rope_scaling``); no attention soft-capping (transformers 5.23's
  Gemma 3 does not apply ``attn_logit_softcapping``). A multimodal folder
  (``Gemma3ForConditionalGeneration``) loads as ``Gemma3ForCausalLM``: its ``text_config``
  (without ``final_logit_softcapping``, which that class does not apply) and the language
  model's weights; the vision tower's are skipped.

The blocks are one set, arranged by the config (``GemmaConfig.from_dict`` picks the config
class of the file's ``model_type``), so the family's default class builds any of them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from js import Module, Parameter, Rngs

from ._base import PreTrainedModel, architectures
from ._decoder import DecoderAttention, DecoderConfig, DecoderLayer, decoder_classes
from ._rope import SUPPORTED_ROPE_TYPES

# ---------------------------------------------------------------------------------------------
# Configs


class GemmaConfig(DecoderConfig):
    """A Gemma ``config.json``: transformers 5.23's ``GemmaConfig`` keys and defaults.

    Example:
        >>> from js.models.gemma import GemmaConfig
        >>> config = GemmaConfig(hidden_act="gelu")
        >>> config.hidden_act, config.head_dim, config.tie_word_embeddings
        ('gelu_pytorch_tanh', 256, True)
    """

    model_type = "gemma"
    # the config key naming the MLP's activation (read by GatedMLP); Gemma 2 and 3 norm each
    # sublayer's output
    activation_key: ClassVar[str] = "hidden_act"
    sandwich_norms: ClassVar[bool] = False
    # transformers runs Gemma 2 with its eager attention only (see GemmaAttention)
    eager_attention: ClassVar[bool] = False

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if vars(self).get("hidden_act") == "gelu":  # the hub's legacy name of the tanh GELU
            self.hidden_act = "gelu_pytorch_tanh"

    def __getattr__(self, name: str) -> Any:
        if name == "hidden_act" and self.activation_key != name:  # the common name too
            return getattr(self, self.activation_key)
        return super().__getattr__(name)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> GemmaConfig:
        """The config of a ``config.json`` mapping: a multimodal Gemma 3 file's
        ``text_config``; from ``GemmaConfig``, the config class of the file's ``model_type``."""
        config = dict(config)
        if config.get("model_type") == "gemma3":  # Gemma3ForConditionalGeneration: its text
            # tied as the outer config says; a head transformers 5.23 does not soft-cap
            config = {
                **(config.get("text_config") or {}),
                "model_type": "gemma3_text",
                "tie_word_embeddings": config.get("tie_word_embeddings", True),
                "final_logit_softcapping": None,
            }
        kind = _CONFIG_CLASSES.get(config.get("model_type", ""), cls) if cls is GemmaConfig else cls
        return kind(**config)

    def sliding_windows(self) -> list[int | None]:
        if getattr(self, "use_bidirectional_attention", None):
            raise NotImplementedError(
                f"{type(self).__name__}: use_bidirectional_attention is not supported (js.models "
                "builds causal decoders). Fix: set it to false"
            )
        return super().sliding_windows()

    def make_norm(self, size: int) -> Module:
        """``GemmaRMSNorm``: ``x * (1 + weight)``, in float32."""
        return GemmaRMSNorm(size, eps=self.rms_norm_eps)

    def embedding_scale(self) -> float:
        return self.hidden_size**0.5

    def attention_softcap(self) -> float | None:
        """The attention scores' soft cap (``attn_logit_softcapping``, when the family has it)."""
        return getattr(self, "attn_logit_softcapping", None)


class Gemma2Config(GemmaConfig):
    """A Gemma 2 ``config.json`` (transformers 5.23's ``Gemma2Config`` keys and defaults);
    ``layer_types`` alternates sliding and full attention unless given.

    Example:
        >>> from js.models.gemma import Gemma2Config
        >>> Gemma2Config(num_hidden_layers=3).layer_types
        ['sliding_attention', 'full_attention', 'sliding_attention']
    """

    model_type = "gemma2"
    activation_key = "hidden_activation"
    sandwich_norms = True
    eager_attention = True

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if self.layer_types is None:  # every pattern-th layer global, the others sliding
            pattern = self.sliding_window_pattern_of(kwargs)
            self.layer_types = [
                "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                for i in range(self.num_hidden_layers)
            ]

    def sliding_window_pattern_of(self, kwargs: Mapping[str, Any]) -> int:
        return 2

    def attention_scale(self) -> float:
        return self.query_pre_attn_scalar**-0.5


class Gemma3TextConfig(Gemma2Config):
    """A Gemma 3 text ``config.json`` (transformers 5.23's ``Gemma3TextConfig``).

    ``rope_parameters`` holds one table per layer type, built as transformers'
    ``convert_rope_params_to_dict`` does from older files' ``rope_theta`` (global layers),
    ``rope_local_base_freq`` (sliding ones) and ``rope_scaling`` (global layers).

    Example:
        >>> from js.models.gemma import Gemma3TextConfig
        >>> config = Gemma3TextConfig(num_hidden_layers=3, sliding_window_pattern=3,
        ...     rope_theta=1e5, rope_local_base_freq=1e3)
        >>> config.layer_types[-1], config.rope_parameters["sliding_attention"]["rope_theta"]
        ('full_attention', 1000.0)
    """

    model_type = "gemma3_text"
    family = "Gemma3"
    eager_attention = False

    def __init__(self, **kwargs: Any):
        rope = _layer_type_ropes(kwargs)  # takes rope_theta, rope_local_base_freq, rope_scaling
        super().__init__(**kwargs)
        self.rope_parameters = rope
        self._sliding_window_pattern = self.sliding_window_pattern_of(kwargs)

    def sliding_window_pattern_of(self, kwargs: Mapping[str, Any]) -> int:
        return kwargs.get("sliding_window_pattern", 6)

    def architecture(self, causal: bool) -> str:
        return "Gemma3ForCausalLM" if causal else "Gemma3TextModel"

    def qk_norm(self) -> str:
        return "head"

    def layer_ropes(self) -> list[str | None]:
        return list(self.layer_types[: self.num_hidden_layers])

    def rope_parameters_for(self, kind: str) -> dict[str, Any]:
        return self.rope_parameters[kind]

    def attention_softcap(self) -> None:
        return None


def _layer_type_ropes(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3's ``rope_parameters`` (transformers' ``convert_rope_params_to_dict`` and
    ``standardize_rope_params``), taking the older keys out of ``kwargs``."""
    scaling = kwargs.pop("rope_scaling", None)
    thetas = {
        "full_attention": kwargs.pop("rope_theta", 1_000_000.0),
        "sliding_attention": kwargs.pop("rope_local_base_freq", 10_000.0),
    }
    rope = copy.deepcopy(kwargs.get("rope_parameters")) or {}
    for kind, theta in thetas.items():
        table = rope[kind] = rope.get(kind) or {"rope_type": "default"}
        if kind == "full_attention" and scaling:
            table.update(scaling)
        table.setdefault("rope_theta", theta)
        table.setdefault("rope_type", table.get("type", "default"))
        if table["rope_type"] in ("llama3", "yarn", "longrope"):
            table.setdefault(
                "original_max_position_embeddings", kwargs.get("max_position_embeddings", 131_072)
            )
    return rope


_CONFIG_CLASSES: dict[str, type[GemmaConfig]] = {
    "gemma": GemmaConfig,
    "gemma2": Gemma2Config,
    "gemma3_text": Gemma3TextConfig,
}


# ---------------------------------------------------------------------------------------------
# Blocks


class GemmaRMSNorm(Module):
    """``x / sqrt(mean(x ** 2) + eps) * (1 + weight)`` in float32, returned in ``x``'s dtype;
    ``weight`` starts at zeros (transformers' ``GemmaRMSNorm``)."""

    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = float(eps)
        self.weight = Parameter(jnp.zeros((size,), jnp.float32))

    def forward(self, x: jax.Array) -> jax.Array:
        h = x.astype(jnp.float32)
        h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + self.eps)
        return (h * (1.0 + self.weight.value.astype(jnp.float32))).astype(x.dtype)


class GemmaAttention(DecoderAttention):
    """The skeleton's attention, soft-capped as the family does (``attention_softcap``).

    With the config's ``eager_attention`` (Gemma 2, which transformers runs with its eager
    attention only), a query with no allowed key (a padded position) gets the mean of every
    value of the call, as eager's softmax over scores all at the mask's minimum gives it,
    instead of sdpa's zeros."""

    def __init__(self, config: GemmaConfig, layer_idx: int, *, rngs: Rngs):
        super().__init__(config, layer_idx, rngs=rngs)
        softcap = config.attention_softcap()
        self.softcap = None if softcap is None else float(softcap)
        self.eager = config.eager_attention

    def keyless_rows(self, out: jax.Array, hidden_states: jax.Array, mask: jax.Array) -> jax.Array:
        if not self.eager:
            return out
        B, L, _ = hidden_states.shape  # with a cache: the prompt's padding, at its prefill
        v = self.v_proj(hidden_states).reshape(B, L, self.num_key_value_heads, -1).mean(1)
        v = jnp.repeat(v, self.num_heads // self.num_key_value_heads, axis=1).reshape(B, 1, -1)
        empty = ~jnp.any(mask, axis=-1).reshape(-1, L, 1)  # [B|1, L, 1]
        return jnp.where(empty, self.output(v), out)


class GemmaDecoderLayer(DecoderLayer):
    """Gemma's pre-norm block; with the config's ``sandwich_norms`` (Gemma 2, 3):
    ``x + post_attention_layernorm(self_attn(input_layernorm(x)))``, then
    ``x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))``. The MLP is the
    skeleton's gated one (GeGLU) with the activation the config's ``activation_key`` names."""

    attention_class = GemmaAttention

    def arrange(self, config: DecoderConfig) -> None:
        if config.sandwich_norms:
            self.norms = "sandwich"


# ---------------------------------------------------------------------------------------------
# Models


GemmaModel, GemmaForCausalLM = decoder_classes(
    GemmaConfig, layer_class=GemmaDecoderLayer, scale_given_embeds=False
)
Gemma2Model, Gemma2ForCausalLM = decoder_classes(Gemma2Config, GemmaModel, GemmaForCausalLM)


class _Gemma3Folder(PreTrainedModel):
    """What Gemma 3's classes read from a multimodal folder: its language model's weights."""

    # A Gemma3ForConditionalGeneration folder: the language model's weights (transformers
    # writes them as ``language_model.model.*``, as the hub's files have them;
    # ``model.language_model.*`` is its modules' own name), the vision tower and projector
    # skipped.
    key_mapping = {
        r"^language_model\.model\.": "model.",
        r"^model\.language_model\.": "model.",
        r"^language_model\.lm_head\.": "lm_head.",
    }
    ignore_on_load = (r"^(model\.)?vision_tower\.", r"^(model\.)?multi_modal_projector\.")


class Gemma3TextModel(_Gemma3Folder, GemmaModel):
    """Gemma 3's text decoder (see ``GemmaModel``); reads multimodal folders' text weights."""

    config_class = Gemma3TextConfig


class Gemma3ForCausalLM(_Gemma3Folder, GemmaForCausalLM):
    """Gemma 3 with its language-model head (see ``GemmaForCausalLM``); a
    ``Gemma3ForConditionalGeneration`` folder loads as this (its text model)."""

    base_model_class = Gemma3TextModel


ARCHITECTURES = {
    **architectures(
        GemmaForCausalLM,
        GemmaModel,
        Gemma2ForCausalLM,
        Gemma2Model,
        Gemma3ForCausalLM,
        Gemma3TextModel,
    ),
    "Gemma3ForConditionalGeneration": Gemma3ForCausalLM,  # its text model
}

__all__ = [
    "ARCHITECTURES",
    "SUPPORTED_ROPE_TYPES",
    "Gemma2Config",
    "Gemma2ForCausalLM",
    "Gemma2Model",
    "Gemma3ForCausalLM",
    "Gemma3TextConfig",
    "Gemma3TextModel",
    "GemmaConfig",
    "GemmaForCausalLM",
    "GemmaModel",
    "GemmaRMSNorm",
]
