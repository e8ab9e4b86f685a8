"""Whisper (transformers' ``WhisperModel`` and ``WhisperForConditionalGeneration``, model_type
``whisper``) with transformers 5.23's module and state-dict names.

The encoder reads log-mel features ``[B, num_mel_bins, 2 * max_source_positions]`` (``[B, 80,
3000]`` from ``WhisperFeatureExtractor``): two convolutions with GELU (the second halves the
frames), sinusoidal positions (stored as ``encoder.embed_positions.weight``), pre-LN blocks
(``self_attn``, ``fc1``/``fc2``) and a final ``layer_norm``. The decoder adds learned positions
to its token embeddings; each pre-LN block attends causally to the tokens (``self_attn``), then
to the encoder's output (``encoder_attn``). Every attention's ``k_proj`` has no bias and goes
through js.nn's one kernel. ``proj_out`` is tied to ``decoder.embed_tokens``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import jax
import jax.numpy as jnp
import numpy as np

from js import Module, Rngs, nn
from js.nn import functional as F
from js.nn.attention import decoder_mask

from ._base import PretrainedConfig, PreTrainedModel, architectures
from ._generation import generation_config
from ._hf import activation, attend, check_tokens, split_heads
from ._seq2seq import Seq2SeqGenerationMixin, cross_key_values

__all__ = ["WhisperConfig", "WhisperForConditionalGeneration", "WhisperModel"]


class WhisperConfig(PretrainedConfig):
    """Whisper's ``config.json`` (transformers' keys and defaults: whisper-tiny's layout with
    4 + 4 layers of 384 features)."""

    model_type = "whisper"
    attribute_map = {"hidden_size": "d_model", "num_attention_heads": "encoder_attention_heads"}


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> jax.Array:
    """The encoder's position table ``[length, channels]``: sines then cosines of
    ``position * exp(-log(max_timescale) * i / (channels / 2 - 1))`` (Whisper's)."""
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inverse = jnp.exp(-increment * jnp.arange(channels // 2))
    time = jnp.arange(length)[:, None] * inverse[None, :]  # [length, channels / 2]
    return jnp.concatenate([jnp.sin(time), jnp.cos(time)], axis=1)


class WhisperAttention(Module):
    """Multi-head attention: ``q_proj``, ``k_proj`` (no bias), ``v_proj`` and ``out_proj``.
    Self-attention projects keys and values from its input (into the ``cache`` when decoding);
    cross-attention is given them (``key_values`` of the encoder's output)."""

    key_bias: ClassVar[bool] = False  # BART's k_proj has a bias

    def __init__(self, config: PretrainedConfig, heads: int, *, rngs: Rngs):
        super().__init__()
        D = config.d_model
        if D % heads:
            raise ValueError(
                f"WhisperModel: d_model={D} is not a multiple of {heads} attention heads. Fix: "
                "choose heads dividing it"
            )
        self.num_heads = heads
        self.k_proj = nn.Linear(D, D, bias=self.key_bias, rngs=rngs)
        self.v_proj = nn.Linear(D, D, rngs=rngs)
        self.q_proj = nn.Linear(D, D, rngs=rngs)
        self.out_proj = nn.Linear(D, D, rngs=rngs)

    def key_values(self, hidden: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Keys and values ``[B, heads, L, head_dim]`` of ``hidden`` ``[B, L, d_model]``."""
        return split_heads(self.k_proj(hidden), self.num_heads), split_heads(
            self.v_proj(hidden), self.num_heads
        )

    def forward(
        self,
        hidden: jax.Array,
        mask: jax.Array | None,
        *,
        key_values: tuple[jax.Array, jax.Array] | None = None,
        cache: Any = None,
        layer_idx: int = 0,
    ) -> jax.Array:
        q = split_heads(self.q_proj(hidden), self.num_heads)  # [B, heads, L, head_dim]
        k, v = self.key_values(hidden) if key_values is None else key_values
        if cache is not None:  # every cached slot: [B, heads, max_length, head_dim]
            k, v = cache.update(layer_idx, k, v)
        attended = attend(q, k, v, mask, dropout=0.0, training=False, rngs=None)
        return self.out_proj(attended)  # [B, L, d_model]


class WhisperEncoderLayer(Module):
    """Pre-LN block: ``x + self_attn(self_attn_layer_norm(x))``, then ``x + fc2(act(fc1(
    final_layer_norm(x))))`` (``pre_norm`` False: each sub-block's norm after its residual,
    BART's)."""

    attention_class: ClassVar[type[WhisperAttention]] = WhisperAttention
    pre_norm: ClassVar[bool] = True

    def __init__(self, config: PretrainedConfig, heads: int, ffn: int, *, rngs: Rngs):
        super().__init__()
        D = config.d_model
        self.self_attn = self.attention_class(config, heads, rngs=rngs)
        self.self_attn_layer_norm = nn.LayerNorm(D)
        self.activation_fn = activation(
            "WhisperModel", "activation_function", config.activation_function
        )
        self.fc1 = nn.Linear(D, ffn, rngs=rngs)
        self.fc2 = nn.Linear(ffn, D, rngs=rngs)
        self.final_layer_norm = nn.LayerNorm(D)

    def residual(
        self, hidden: jax.Array, norm: Module, block: Any, *args: Any, **options: Any
    ) -> jax.Array:
        """``hidden + block(norm(hidden), ...)`` (pre-LN), else ``norm(hidden + block(hidden,
        ...))``."""
        if self.pre_norm:
            return hidden + block(norm(hidden), *args, **options)
        return norm(hidden + block(hidden, *args, **options))

    def fc(self, hidden: jax.Array) -> jax.Array:
        """``fc2(act(fc1(hidden)))``."""
        return self.fc2(self.activation_fn(self.fc1(hidden)))

    def forward(self, hidden: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """``mask``: the source's padding ``[B, 1, 1, S]`` (Whisper's: None)."""
        hidden = self.residual(hidden, self.self_attn_layer_norm, self.self_attn, mask)
        return self.residual(hidden, self.final_layer_norm, self.fc)


class WhisperDecoderLayer(WhisperEncoderLayer):
    """Pre-LN block: causal self-attention, cross-attention over the encoder's output
    (``encoder_attn``, ``encoder_attn_layer_norm``), then the feed-forward block."""

    def __init__(self, config: PretrainedConfig, *, rngs: Rngs):
        heads = config.decoder_attention_heads
        super().__init__(config, heads, config.decoder_ffn_dim, rngs=rngs)
        self.encoder_attn = self.attention_class(config, heads, rngs=rngs)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)

    def forward(  # type: ignore[override]
        self,
        hidden: jax.Array,
        mask: jax.Array,
        cross: tuple[jax.Array, jax.Array],
        *,
        cache: Any,
        layer_idx: int,
        cross_mask: jax.Array | None = None,
    ) -> jax.Array:
        """``cross_mask``: the source's padding ``[B, 1, 1, S]`` (Whisper's: None)."""
        hidden = self.residual(
            hidden,
            self.self_attn_layer_norm,
            self.self_attn,
            mask,
            cache=cache,
            layer_idx=layer_idx,
        )
        hidden = self.residual(
            hidden, self.encoder_attn_layer_norm, self.encoder_attn, cross_mask, key_values=cross
        )
        return self.residual(hidden, self.final_layer_norm, self.fc)


class DecoderStack(Module):
    """The decoder forward Whisper and BART share: ``layers`` over ``embed(ids, positions)``,
    each attending causally to the tokens (to the cache's when generating), then to the
    encoder's keys and values (the cache's, else from the encoder's output) where
    ``cross_mask`` allows, then ``final``.

    Shape:
        ``input_ids`` ``[B, T]`` (and ``attention_mask`` ``[B, T]``), the encoder's output
        ``[B, S, d_model]`` (and ``encoder_attention_mask`` ``[B, S]``) -> ``[B, T, d_model]``.
    """

    owner: ClassVar[str] = "WhisperModel"  # its errors' prefix

    def forward(
        self,
        input_ids: Any,
        attention_mask: Any,
        encoder_hidden: jax.Array | None,
        encoder_attention_mask: Any = None,
        *,
        cache: Any = None,
    ) -> jax.Array:
        ids, _ = check_tokens(self.owner, input_ids, None)
        assert ids is not None
        B, T = ids.shape
        if cache is None:  # positions 0..T-1 whatever the padding, as transformers counts them
            positions = jnp.broadcast_to(jnp.arange(T), (B, T))
            mask = decoder_mask(T, attention_mask)
        else:
            positions, mask = cache.begin(T, attention_mask), cache.mask(T)
        hidden = cast(Any, self).embed(ids, positions)  # [B, T, d_model]
        cross_mask = self.cross_mask(encoder_attention_mask, cache)
        for index, layer in enumerate(cast(Any, self).layers):
            # the encoder's keys and values: the generation cache's, else from encoder_hidden
            cross = cross_key_values(layer.encoder_attn, index, encoder_hidden, cache, hidden.dtype)
            hidden = layer(hidden, mask, cross, cache=cache, layer_idx=index, cross_mask=cross_mask)
        return self.final(hidden)

    def cross_mask(self, encoder_attention_mask: Any, cache: Any) -> jax.Array | None:
        """The cross-attention's mask ``[B, 1, 1, S]``; None: every source position (Whisper's
        audio, padded with silence that it attends to)."""
        return None

    def final(self, hidden: jax.Array) -> jax.Array:
        """The stack's output from its last layer's (as it is)."""
        return hidden


class WhisperStack(Module):
    """What the encoder and the decoder share: ``embed_positions`` (a table of ``positions``
    rows), their ``layers`` and the final ``layer_norm``."""

    def __init__(
        self, config: WhisperConfig, positions: int, layers: Sequence[Module], *, rngs: Rngs
    ):
        super().__init__()
        self.embed_positions = nn.Embedding(positions, config.d_model, rngs=rngs)
        self.layers = nn.ModuleList(layers)
        self.layer_norm = nn.LayerNorm(config.d_model)


class WhisperEncoder(WhisperStack):
    """``conv1``/``conv2`` with GELU, sinusoidal ``embed_positions``, ``layers`` and
    ``layer_norm``.

    Shape:
        ``input_features`` ``[B, num_mel_bins, 2 * max_source_positions]`` ->
        ``[B, max_source_positions, d_model]``.
    """

    def __init__(self, config: WhisperConfig, *, rngs: Rngs):
        S, heads, ffn = (
            config.max_source_positions,
            config.encoder_attention_heads,
            config.encoder_ffn_dim,
        )
        layers = [
            WhisperEncoderLayer(config, heads, ffn, rngs=rngs) for _ in range(config.encoder_layers)
        ]
        super().__init__(config, S, layers, rngs=rngs)
        self.embed_positions.weight.value = sinusoids(S, config.d_model)
        self.num_mel_bins, self.frames = config.num_mel_bins, 2 * S
        self.conv1 = nn.Conv1d(config.num_mel_bins, config.d_model, 3, padding=1, rngs=rngs)
        self.conv2 = nn.Conv1d(config.d_model, config.d_model, 3, stride=2, padding=1, rngs=rngs)

    def forward(self, input_features: Any, attention_mask: Any = None) -> jax.Array:
        """``attention_mask`` is not read (as transformers'): the audio's padding is silence."""
        features = jnp.asarray(input_features)
        want = (self.num_mel_bins, self.frames)
        if features.ndim != 3 or tuple(features.shape[1:]) != want:
            raise ValueError(
                f"WhisperModel: input_features must be [B, num_mel_bins, frames] = [B, {want[0]}, "
                f"{want[1]}], got shape {list(features.shape)}. Fix: pad or cut the audio to 30 s "
                "(WhisperFeatureExtractor does)"
            )
        hidden = F.gelu(self.conv1(features))
        hidden = F.gelu(self.conv2(hidden)).transpose(0, 2, 1)  # [B, S, d_model]
        hidden = hidden + self.embed_positions.weight.value.astype(hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden)
        return self.layer_norm(hidden)


class WhisperDecoder(WhisperStack, DecoderStack):
    """``embed_tokens``, learned ``embed_positions``, ``layers`` and ``layer_norm`` (shapes as
    ``DecoderStack``'s; ``encoder_attention_mask`` is not read)."""

    def __init__(self, config: WhisperConfig, *, rngs: Rngs):
        layers = [WhisperDecoderLayer(config, rngs=rngs) for _ in range(config.decoder_layers)]
        super().__init__(config, config.max_target_positions, layers, rngs=rngs)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, rngs=rngs)

    def final(self, hidden: jax.Array) -> jax.Array:
        """``layer_norm(hidden)``."""
        return self.layer_norm(hidden)

    def embed(self, ids: jax.Array, positions: jax.Array) -> jax.Array:
        """The tokens' and positions' embeddings ``[B, T, d_model]``."""
        return self.embed_tokens(ids) + self.embed_positions(positions)


class Seq2SeqModel(PreTrainedModel):
    """Whisper's and BART's base models: an ``encoder_class`` ``encoder`` and a
    ``decoder_class`` ``decoder`` (under ``model`` in their heads)."""

    base_model_prefix = "model"
    encoder_class: ClassVar[type[Any]]
    decoder_class: ClassVar[type[Any]]

    def __init__(self, config: PretrainedConfig, *, rngs: Rngs):
        super().__init__(config)
        self.encoder = self.encoder_class(config, rngs=rngs)
        self.decoder = self.decoder_class(config, rngs=rngs)


class WhisperModel(Seq2SeqModel):
    """Whisper's ``encoder`` and ``decoder`` without a head.

    ``forward(input_features, decoder_input_ids, decoder_attention_mask=None)`` returns
    ``(last_hidden_state [B, T, d_model], encoder_last_hidden_state [B, S, d_model])``;
    ``encoder_outputs=`` (the encoder's last hidden state, with ``input_features`` None) skips
    the encoder.
    """

    config_class = WhisperConfig
    encoder_class, decoder_class = WhisperEncoder, WhisperDecoder

    def forward(
        self,
        input_features: Any,
        decoder_input_ids: Any,
        decoder_attention_mask: Any = None,
        *,
        encoder_outputs: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        if (input_features is None) == (encoder_outputs is None):
            raise ValueError(
                "WhisperModel: give exactly one of input_features and encoder_outputs. Fix: "
                "model(features, decoder_input_ids)"
            )
        encoded = self.encoder(input_features) if encoder_outputs is None else encoder_outputs
        return self.decoder(decoder_input_ids, decoder_attention_mask, encoded), encoded


OWNER = "WhisperForConditionalGeneration.generate"


def _language_ids(languages: list[str], lang_to_id: dict[str, int]) -> list[int]:
    """Each language's token id: ``"<|fr|>"`` as given, ``"fr"`` as ``"<|fr|>"``."""
    ids = []
    for language in languages:
        token = language if language in lang_to_id else f"<|{language.lower()}|>"
        if token not in lang_to_id:
            raise ValueError(
                f"{OWNER}: language={language!r} is not in the generation config's lang_to_id "
                f"(it has {len(lang_to_id)} languages). Fix: a code such as 'en' or a token "
                "such as '<|en|>' that the model knows"
            )
        ids.append(lang_to_id[token])
    return ids


def detect_language(model: Any, features: Any, start: int, lang_to_id: dict[str, int]) -> list[int]:
    """Each row's likeliest language token after ``decoder_start_token_id`` (transformers'
    ``detect_language``)."""
    logits = np.asarray(model(features, np.full((len(features), 1), start)))[:, -1]  # [B, V]
    languages = np.asarray(sorted(lang_to_id.values()))
    return languages[logits[:, languages].argmax(-1)].tolist()


def forced_prompt(
    model: Any, features: Any, folder: dict[str, Any], language: Any, task: str | None
) -> np.ndarray:
    """Whisper's decoder prompt ``[B, P]`` as transformers' ``_retrieve_init_tokens`` makes it:
    the start token; the language (given, forced, or detected where the config has
    ``lang_to_id``); the task (given, forced, or transcribe with a given language); then
    ``no_timestamps_token_id``."""
    language = folder.get("language") if language is None else language
    task = folder.get("task") if task is None else task
    if folder.get("is_multilingual") is False and (language or task):
        raise ValueError(
            f"{OWNER}: this model is English-only (is_multilingual false); it takes no language "
            "or task. Fix: leave language and task out"
        )
    start = folder.get("decoder_start_token_id", model.config.decoder_start_token_id)
    head = [start]
    forced = folder.get("forced_decoder_ids") or getattr(model.config, "forced_decoder_ids", None)
    if language is None and task is None and forced:
        for position, token in forced:  # positions 1, 2, ... in turn
            if position != len(head):
                break
            head.append(token)
    B, lang_to_id = len(features), folder.get("lang_to_id")
    task_to_id: dict[str, int] = folder.get("task_to_id") or {}
    languages = [language] * B if isinstance(language, str) else language
    if languages is not None:
        ids = _language_ids(list(languages), lang_to_id or {})
    elif lang_to_id and (len(head) < 2 or head[1] is None):
        ids = detect_language(model, features, start, lang_to_id)
    else:
        ids = None
    if task is not None and task not in task_to_id:
        raise ValueError(
            f"{OWNER}: task={task!r} is not in the generation config's task_to_id "
            f"{sorted(task_to_id)}. Fix: 'transcribe' or 'translate'"
        )
    rows = []
    for row in range(B):
        tokens = list(head)
        if ids is not None:
            tokens[1:2] = [ids[row]]  # the language replaces a forced (or undetected) one
        if task is not None:
            tokens.append(task_to_id[task])
        elif languages is not None and task_to_id and not set(tokens) & set(task_to_id.values()):
            tokens.append(task_to_id["transcribe"])
        no_timestamps = folder.get("no_timestamps_token_id")
        if no_timestamps is not None and tokens[-1] != no_timestamps:
            tokens.append(no_timestamps)
        rows.append([token for token in tokens if token is not None])
    return np.asarray(rows, np.int32)


class Seq2SeqLMHead(Seq2SeqGenerationMixin):
    """What Whisper's and BART's heads share: ``model``, a ``base_model_class`` (whose config
    class and prefix the head takes); the ``head_name`` projection to the vocabulary (tied to
    the decoder's ``embed_tokens`` with ``tie_word_embeddings``); ``forward``, the
    ``logits(hidden)`` of its decoder's output; and _seq2seq's generation contract on
    ``model.encoder`` and ``model.decoder``."""

    base_model_class: ClassVar[type[Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.config_class = cls.base_model_class.config_class
        cls.base_model_prefix = cls.base_model_class.base_model_prefix

    head_name: ClassVar[str] = "lm_head"

    def __init__(self, config: PretrainedConfig, *, rngs: Rngs):
        super().__init__(config)  # type: ignore[call-arg]
        self.model = self.base_model_class(config, rngs=rngs)
        head = nn.Linear(config.d_model, config.vocab_size, bias=False, rngs=rngs)
        if config.tie_word_embeddings:  # to the decoder's token embedding
            head.weight = self.model.decoder.embed_tokens.weight
        setattr(self, self.head_name, head)

    def encode(self, input_ids: Any, attention_mask: Any = None) -> jax.Array:
        """The encoder's last hidden state ``[B, S, d_model]``."""
        return self.model.encoder(input_ids, attention_mask)

    def forward(self, *inputs: Any, **options: Any) -> jax.Array:
        model = cast(Any, self)
        return model.logits(model.model(*inputs, **options)[0])

    def cross_attentions(self) -> list[WhisperAttention]:
        """Each decoder layer's cross-attention."""
        return [layer.encoder_attn for layer in cast(Any, self).model.decoder.layers]

    def make_decoder_cache(self, batch_size: int, max_length: int, *, dtype: Any = None):
        """The decoder's self-attention ``js.nn.KVCache``."""
        model = cast(Any, self)
        heads, D = model.config.decoder_attention_heads, model.config.d_model
        dtype = model.model.decoder.embed_tokens.weight.value.dtype if dtype is None else dtype
        layers = model.config.decoder_layers
        return nn.KVCache(batch_size, max_length, layers, heads, D // heads, dtype=dtype)

    def decode(
        self, input_ids: Any, attention_mask: Any = None, *, cache: Any, logits_to_keep: int = 0
    ) -> jax.Array:
        """Logits ``[B, T or logits_to_keep, vocab]`` of the decoder over the cached source."""
        model = cast(Any, self)
        hidden = model.model.decoder(input_ids, attention_mask, None, cache=cache)
        return model.logits(hidden[:, -logits_to_keep:] if logits_to_keep else hidden)


class WhisperForConditionalGeneration(Seq2SeqLMHead, PreTrainedModel):
    """``WhisperModel`` and ``proj_out`` (tied to ``decoder.embed_tokens``): ``forward`` returns
    the decoder's logits ``[B, T, vocab_size]`` (arguments as ``WhisperModel.forward``);
    ``generate`` transcribes or translates short-form audio (up to 30 s) as transformers'
    ``WhisperForConditionalGeneration.generate`` does."""

    base_model_class = WhisperModel
    head_name = "proj_out"
    proj_out: nn.Linear

    def logits(self, hidden: jax.Array) -> jax.Array:
        """``proj_out(hidden)``."""
        return self.proj_out(hidden)

    # -- what _seq2seq's generation reads (Seq2SeqGenerationMixin) --

    def generation_source(self, input_features: Any, attention_mask: Any) -> tuple[Any, Any]:
        """The features as they are, and every encoder position real (Whisper's audio is
        padded with silence, which it attends to)."""
        features = np.asarray(input_features, np.float32)
        return features, np.ones((features.shape[0], self.config.max_source_positions), np.int32)

    def generate(  # type: ignore[override]
        self,
        input_features: Any,
        *,
        language: str | list[str] | None = None,
        task: str | None = None,
        **options: Any,
    ) -> jax.Array:
        """The new tokens ``[B, n]`` after Whisper's forced prompt (``decoder_start_token_id``,
        the language, the task, ``<|notimestamps|>``), as transformers returns them for audio
        of up to 30 s.

        Args:
            input_features: ``[B, num_mel_bins, 3000]`` (``WhisperFeatureExtractor``).
            language: ``"fr"`` or ``"<|fr|>"`` (or one per row); None: the generation config's
                ``forced_decoder_ids``, else detected (the likeliest language token).
            task: ``"transcribe"`` or ``"translate"``; None: the forced one, else transcribe
                where a language is given.
            options: ``suppress_tokens`` and ``begin_suppress_tokens`` (default: the folder's
                ``generation_config.json``) and ``js.models.generate``'s (``max_new_tokens``,
                ``do_sample``, ...).
        """
        folder = generation_config(self)
        for name in ("suppress_tokens", "begin_suppress_tokens"):
            options.setdefault(name, folder.get(name) or [])
        prompt = forced_prompt(self, input_features, folder, language, task)
        options["decoder_start_token_id"] = int(prompt[0, 0])  # the generation config's
        tokens = super().generate(input_features, decoder_input_ids=prompt, **options)
        return tokens[:, prompt.shape[1] :]


ARCHITECTURES = architectures(WhisperForConditionalGeneration, WhisperModel)
