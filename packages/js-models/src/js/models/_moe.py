"""Sparse mixtures of experts on the decoder skeleton (Mixtral, Qwen2-MoE, Qwen3-MoE), as in
transformers 5.23.

A sparse block replaces a layer's MLP: the router ``gate`` (``[E, hidden]``, no bias) scores
the ``E`` experts of each token; softmax (float32), the ``top_k`` best, renormalised to sum to
one when the family does (Mixtral always, Qwen with ``norm_topk_prob``); each chosen expert is
a SwiGLU MLP, ``down_proj[e] @ (act(gate) * up)`` with ``gate, up = gate_up_proj[e] @ x``; the
block returns the routing-weighted sum. Qwen2-MoE adds a dense ``shared_expert`` behind a
sigmoid gate (``shared_expert_gate``).

Expert weights are stacked, as transformers 5 keeps them: ``experts.gate_up_proj``
``[E, 2 * inner, hidden]`` (gate rows, then up rows) and ``experts.down_proj``
``[E, hidden, inner]``; ``save_pretrained`` writes them so, and transformers 5.23 reads them.
transformers' own ``save_pretrained`` (and every hub checkpoint) writes one matrix per expert
instead (``experts.N.w1``/``w3``/``w2`` in Mixtral's ``block_sparse_moe``;
``experts.N.gate_proj``/``up_proj``/``down_proj`` in Qwen's ``mlp``). The model classes'
``weights_view`` presents a folder's tensors with those stacked (``ExpertStacks``, a slice of
experts read from its experts' tensors only), for the loader to read the folder through.

Compute scales with ``top_k``, not ``E``. ``experts_dispatch`` picks an exact path from the
platform and the number of assignments ``A = T * top_k`` (static: when the program is lowered):
a few (``A <= E``, a decode step) gather their experts' matrices (``experts_gather``); more (a
prefill) are sorted by expert and multiplied group by group (``jax.lax.ragged_dot_general``,
``experts_grouped``). XLA:CPU computes a ragged dot as ``E`` dense products (8-38x a dense MLP
of the active size, measured) and gathers slowly, so on the CPU a prefill loops over blocks of
rows of one expert each (``experts_blocked``: 1.6-3.3x that MLP from 1024 down to 64 tokens),
a batch's decode step over its assignments (``experts_looped``), and only ``4 A <= E`` gathers.
All are the sums of transformers' loop over experts.

``output_router_logits=True`` (``MoeForCausalLM.forward``) returns the router logits of every
sparse layer and transformers' load-balancing loss (``load_balancing_loss``); the training loss
adds ``config.router_aux_loss_coef * aux_loss``, as transformers does with labels.

Expert parallelism: ``expert_rules("expert")`` are ``js.shard`` rules putting each device's
share of the experts on it (``[E, ...]`` split on the expert axis).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from js import Module, Parameter, Rngs, nn, remat

from ._base import PreTrainedModel
from ._decoder import DecoderConfig, DecoderForCausalLM, DecoderLayer, DecoderModel, GatedMLP
from ._hf import activation

# ---------------------------------------------------------------------------------------------
# Config


# transformers' keys of the router's outputs, in every family's config
ROUTER_DEFAULTS: dict[str, Any] = {"output_router_logits": False, "router_aux_loss_coef": 0.001}
# and of the sparse layers as Qwen's families (Qwen2-MoE, Qwen3-MoE) place them
SPARSE_LAYER_DEFAULTS: dict[str, Any] = {
    "decoder_sparse_step": 1,
    "mlp_only_layers": None,
    "norm_topk_prob": False,
    **ROUTER_DEFAULTS,
}


class MoeConfig(DecoderConfig):
    """The hooks a sparse block reads; the defaults are Qwen's keys (``num_experts``,
    ``moe_intermediate_size``, ``norm_topk_prob``, ``decoder_sparse_step``, ``mlp_only_layers``).

    A family with ``use_sliding_window`` keeps ``sliding_window`` only when it is set (else
    ``unused_sliding_window``, as transformers writes it); one without ``layer_types`` attends
    within ``sliding_window`` (None: full attention) in every layer.
    """

    # the per-expert tensors of older files (and transformers' save_pretrained): stacked name
    # -> the per-expert names concatenated into it (``ExpertStacks``)
    expert_file_names: ClassVar[dict[str, tuple[str, ...]]] = {
        "gate_up_proj": ("gate_proj", "up_proj"),
        "down_proj": ("down_proj",),
    }
    unused_sliding_window: ClassVar[int | None] = None

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if "mlp_only_layers" in self.defaults and self.mlp_only_layers is None:
            self.mlp_only_layers = []
        if "use_sliding_window" in self.defaults and not self.use_sliding_window:
            self.sliding_window = self.unused_sliding_window

    def routed_experts(self) -> int:
        """The number of routed experts ``E``."""
        return self.num_experts

    def expert_size(self) -> int:
        """Each expert's inner size."""
        return self.moe_intermediate_size

    def normalize_top_k(self) -> bool:
        """Whether the chosen experts' probabilities are renormalised to sum to one."""
        return bool(self.norm_topk_prob)

    def shared_expert_size(self) -> int | None:
        """The inner size of a shared expert (Qwen2-MoE), or None."""
        return None

    def sparse_layer(self, layer_idx: int) -> bool:
        """Whether layer ``layer_idx`` has a sparse block (else a dense ``GatedMLP``)."""
        return (
            layer_idx not in (self.mlp_only_layers or [])
            and self.routed_experts() > 0
            and (layer_idx + 1) % self.decoder_sparse_step == 0
        )

    def sliding_windows(self) -> list[int | None]:
        """As ``layer_types`` says (``DecoderConfig.sliding_windows``) where the family has
        them, else ``sliding_window`` in every layer."""
        if "layer_types" in self.defaults:
            return super().sliding_windows()
        return [self.sliding_window] * self.num_hidden_layers


# ---------------------------------------------------------------------------------------------
# The experts' products


class Experts(NamedTuple):
    """``E`` stacked SwiGLU experts: ``gate_up`` ``[E, 2 * inner, hidden]`` (gate rows, then up
    rows) and ``down`` ``[E, hidden, inner]`` (each expert's as a Linear's ``[out, in]``), and
    their activation ``act``."""

    gate_up: jax.Array
    down: jax.Array
    act: Callable[[jax.Array], jax.Array]

    def swiglu(self, h: jax.Array) -> jax.Array:
        """``act(gate) * up`` of gate-up products ``h`` ``[..., 2 * inner]``."""
        gate, up = jnp.split(h, 2, axis=-1)
        return self.act(gate) * up

    def of(self, e: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Expert ``e``'s ``(gate_up, down)`` (``e`` traced: read in place, not gathered)."""
        pick = functools.partial(jax.lax.dynamic_index_in_dim, index=e, keepdims=False)
        return pick(self.gate_up), pick(self.down)


class Routing(NamedTuple):
    """Each token's ``k`` chosen experts, ``index`` ``[T, k]``, and their ``weights``
    ``[T, k]``: ``A = T * k`` assignments, numbered token-major (``a // k`` is the token)."""

    index: jax.Array
    weights: jax.Array

    def rows(self, x: jax.Array, order: jax.Array | None = None) -> jax.Array:
        """The token row ``x`` ``[T, H]`` of each assignment (of ``order``, else all):
        ``[A, H]``."""
        assignments = jnp.arange(self.index.size) if order is None else order
        return x[assignments // self.index.shape[1]]

    def by_expert(self, num_experts: int) -> tuple[jax.Array, jax.Array]:
        """The assignments in expert order (stable), and each expert's count."""
        flat = self.index.reshape(-1)
        counts = jnp.sum(flat[:, None] == jnp.arange(num_experts), axis=0)  # no scatter: fast
        return jnp.argsort(flat, stable=True), counts

    def combine(self, y: jax.Array, dtype: Any, order: jax.Array | None = None) -> jax.Array:
        """The outputs ``y`` ``[A, H]`` of the assignments (of ``order``, else token-major)
        times their weights, summed per token: ``[T, H]``."""
        if order is not None:
            y = y[jnp.argsort(order)]
        y = y.reshape(*self.index.shape, -1)  # [T, k, H]
        return jnp.sum((y * self.weights[..., None]).astype(dtype), axis=1)


def experts_gather(x: jax.Array, routing: Routing, experts: Experts) -> jax.Array:
    """Each token's ``k`` chosen experts, their matrices gathered (``A`` of them): for a few
    tokens. ``x`` ``[T, H]`` -> ``[T, H]``."""
    chosen = routing.index.reshape(-1)  # [A]
    h = jnp.einsum("aoh,ah->ao", experts.gate_up[chosen], routing.rows(x))  # [A, 2I]
    y = jnp.einsum("ahi,ai->ah", experts.down[chosen], experts.swiglu(h))  # [A, H]
    return routing.combine(y, x.dtype)


def experts_looped(x: jax.Array, routing: Routing, experts: Experts) -> jax.Array:
    """A loop over the ``A`` assignments, each reading its expert's matrices in place: the CPU
    path for a decode step of a batch (gathering them all at once cost 2x there)."""

    def step(_: None, item: tuple[jax.Array, jax.Array]) -> tuple[None, jax.Array]:
        row, e = item
        gate_up, down = experts.of(e)
        return None, down @ experts.swiglu(gate_up @ row)

    _, y = jax.lax.scan(step, None, (routing.rows(x), routing.index.reshape(-1)))
    return routing.combine(y, x.dtype)


# ragged rows of the lhs against the group's matrix [E, out, in], contracting "in"
_RAGGED = jax.lax.RaggedDotDimensionNumbers(
    dot_dimension_numbers=(([1], [2]), ([], [])),
    lhs_ragged_dimensions=[0],
    rhs_group_dimensions=[0],
)


def experts_grouped(x: jax.Array, routing: Routing, experts: Experts) -> jax.Array:
    """Tokens sorted by expert, one grouped matmul (``jax.lax.ragged_dot_general``) per
    projection: the GPU/TPU path for many tokens (XLA:CPU computes every group densely)."""
    order, sizes = routing.by_expert(experts.gate_up.shape[0])
    rows = routing.rows(x, order)  # [A, H]
    h = jax.lax.ragged_dot_general(rows, experts.gate_up, sizes, _RAGGED)
    y = jax.lax.ragged_dot_general(experts.swiglu(h), experts.down, sizes, _RAGGED)
    return routing.combine(y, x.dtype, order)


def block_rows(assignments: int, num_experts: int) -> int:
    """The rows of a block in ``experts_blocked``: the power of two at or below twice the mean
    rows per expert, from 8 to 128 (the fastest on the CPU, measured from 64 to 1024 tokens)."""
    target = max(1, 2 * assignments // num_experts)
    return int(min(128, max(8, 1 << (target.bit_length() - 1))))


def experts_blocked(
    x: jax.Array, routing: Routing, experts: Experts, block: int | None = None
) -> jax.Array:
    """Tokens sorted by expert, each expert's rows padded to whole blocks of ``block`` rows, a
    loop over the blocks multiplying each by its expert's matrices: the CPU path for many
    tokens (``A + E * block`` rows computed, blocks past the used ones skipped)."""
    E, H = experts.gate_up.shape[0], x.shape[-1]
    A = routing.index.size
    block = block_rows(A, E) if block is None else block
    blocks = (A + E * (block - 1)) // block  # at most this many blocks are used
    order, sizes = routing.by_expert(E)
    padded = (sizes + block - 1) // block * block
    ends = jnp.cumsum(padded)
    starts_padded, starts = ends - padded, jnp.cumsum(sizes) - sizes
    # each padded row's expert (E: past the used blocks) and the sorted assignment it holds
    owner = jnp.searchsorted(ends, jnp.arange(blocks) * block, side="right", method="compare_all")
    row_owner = jnp.minimum(jnp.repeat(owner, block), E - 1)
    rank = jnp.arange(blocks * block) - starts_padded[row_owner]
    held = (jnp.repeat(owner, block) < E) & (rank < sizes[row_owner])
    source = order[jnp.clip(starts[row_owner] + rank, 0, A - 1)]
    padded_rows = jnp.where(held[:, None], routing.rows(x, source), 0)
    expert = routing.index.reshape(-1)[order]
    position = starts_padded[expert] + jnp.arange(A) - starts[expert]  # row in the padded layout

    def step(_: None, item: tuple[jax.Array, jax.Array]) -> tuple[None, jax.Array]:
        rows, e = item

        def run() -> jax.Array:
            gate_up, down = experts.of(jnp.minimum(e, E - 1))
            return experts.swiglu(rows @ gate_up.T) @ down.T

        return None, jax.lax.cond(e < E, run, lambda: jnp.zeros((block, H), x.dtype))

    _, out = jax.lax.scan(step, None, (padded_rows.reshape(blocks, block, H), owner))
    return routing.combine(out.reshape(-1, H)[position], x.dtype, order)


@functools.partial(jax.jit, static_argnames="act")
def experts_dispatch(
    x: jax.Array,
    index: jax.Array,
    weights: jax.Array,
    gate_up: jax.Array,
    down: jax.Array,
    act: Callable[[jax.Array], jax.Array],
) -> jax.Array:
    """The experts' sum by the fastest exact path for the platform and the assignments
    ``A = T * k`` (static shapes: chosen when the program is lowered), as measured (see the
    module's docstring): ``experts_gather`` for a few (``A <= E``; on the CPU ``4 A <= E``); on GPU
    and TPU ``experts_grouped`` for more; on the CPU ``experts_looped`` up to ``A <= E`` and
    ``experts_blocked`` beyond. Compiled once per shape (eager calls too)."""
    A, E = index.size, gate_up.shape[0]
    args = (x, Routing(index, weights), Experts(gate_up, down, act))
    if 4 * A <= E:
        return experts_gather(*args)
    cpu = experts_looped if A <= E else experts_blocked
    accelerator = experts_gather if A <= E else experts_grouped
    return jax.lax.platform_dependent(
        cpu=functools.partial(cpu, *args), default=functools.partial(accelerator, *args)
    )


# ---------------------------------------------------------------------------------------------
# Modules


class MoeExperts(Module):
    """``E`` SwiGLU experts, stacked: ``gate_up_proj`` ``[E, 2 * inner, hidden]`` and
    ``down_proj`` ``[E, hidden, inner]`` (each expert's matrices as a Linear's ``[out, in]``).

    ``forward(x [T, hidden], top_k_index [T, k], top_k_weights [T, k]) -> [T, hidden]``.
    """

    def __init__(self, config: MoeConfig, *, rngs: Rngs):
        super().__init__()
        E, H, inner = config.routed_experts(), config.hidden_size, config.expert_size()
        self.hidden_act = config.hidden_act
        activation(type(config).__name__, "hidden_act", self.hidden_act)
        # each expert's matrices as nn.Linear initialises them: U(-1/sqrt(in), 1/sqrt(in))
        self.gate_up_proj = _uniform((E, 2 * inner, H), H, rngs)
        self.down_proj = _uniform((E, H, inner), inner, rngs)

    def forward(self, x: jax.Array, top_k_index: jax.Array, top_k_weights: jax.Array) -> jax.Array:
        act = activation("MoeExperts", "hidden_act", self.hidden_act)
        gate_up, down = self.gate_up_proj.value, self.down_proj.value
        return experts_dispatch(x, top_k_index, top_k_weights, gate_up, down, act=act)


# the router logits of the sparse blocks run while a forward collects them (a list), else None
_ROUTER_LOGITS: ContextVar[list[jax.Array] | None] = ContextVar("router_logits", default=None)


@contextlib.contextmanager
def collect_router_logits() -> Iterator[list[jax.Array]]:
    """A list that every sparse block run inside the ``with`` appends its router logits
    ``[B * L, E]`` to (in layer order)."""
    collected: list[jax.Array] = []
    token = _ROUTER_LOGITS.set(collected)
    try:
        yield collected
    finally:
        _ROUTER_LOGITS.reset(token)


class SparseMoeBlock(Module):
    """The router ``gate`` and the ``experts`` (and Qwen2-MoE's gated ``shared_expert``):
    ``[B, L, hidden] -> [B, L, hidden]``."""

    def __init__(self, config: MoeConfig, *, rngs: Rngs):
        super().__init__()
        self.top_k, self.normalize = config.num_experts_per_tok, config.normalize_top_k()
        hidden = config.hidden_size
        self.gate = nn.Linear(hidden, config.routed_experts(), bias=False, rngs=rngs)
        self.experts = MoeExperts(config, rngs=rngs)
        shared = config.shared_expert_size()
        if shared is not None:
            self.shared_expert = GatedMLP(config, rngs=rngs, intermediate_size=shared)
            self.shared_expert_gate = nn.Linear(hidden, 1, bias=False, rngs=rngs)

    def route(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(logits [T, E], top_k_weights [T, k], top_k_index [T, k])`` of tokens ``[T, H]``."""
        logits = self.gate(x)
        probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
        weights, index = jax.lax.top_k(probs, self.top_k)
        if self.normalize:
            weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
        return logits, weights, index

    def forward(self, hidden_states: jax.Array) -> jax.Array:
        x = hidden_states.reshape(-1, hidden_states.shape[-1])  # [T, H]
        logits, weights, index = self.route(x)
        collected = _ROUTER_LOGITS.get()
        if collected is not None:
            collected.append(logits)
        out = self.experts(x, index, weights)
        if hasattr(self, "shared_expert"):
            out = out + jax.nn.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out.reshape(hidden_states.shape)


class MoeDecoderLayer(DecoderLayer):
    """The skeleton's pre-norm block with a ``SparseMoeBlock`` as its ``mlp`` (a dense
    ``GatedMLP`` in the layers ``config.sparse_layer`` keeps dense)."""

    def __init__(self, config: MoeConfig, layer_idx: int, *, rngs: Rngs):
        self.sparse = bool(config.sparse_layer(layer_idx))  # read by mlp_class below
        super().__init__(config, layer_idx, rngs=rngs)

    @property
    def mlp_class(self) -> type[Module]:  # type: ignore[override]
        return SparseMoeBlock if self.sparse else GatedMLP


# ---------------------------------------------------------------------------------------------
# The router's load-balancing loss


def load_balancing_loss(
    router_logits: Sequence[jax.Array],
    num_experts: int,
    top_k: int = 2,
    attention_mask: jax.Array | None = None,
) -> jax.Array:
    """transformers' ``load_balancing_loss_func`` (Switch Transformer, eqs. 4-6):
    ``E * sum_e f_e P_e``, ``f_e`` the share of top-k assignments to expert ``e`` per token and
    ``P_e`` its mean router probability, over every layer's tokens (those of
    ``attention_mask`` ``[B, L]`` only, when given).

    Args:
        router_logits: each sparse layer's ``[B * L, E]`` logits.
        num_experts: ``E``.
        top_k: the experts chosen per token.
        attention_mask: 1 for real tokens, 0 for padding; None: every token counts.

    Returns:
        The loss, a float32 scalar (0 without logits).

    Example:
        >>> import jax.numpy as jnp
        >>> from js.models._moe import load_balancing_loss
        >>> float(load_balancing_loss([jnp.zeros((4, 8))], 8, 2))  # uniform routing
        2.0
    """
    if not router_logits:
        return jnp.zeros((), jnp.float32)
    mask = None if attention_mask is None else jnp.asarray(attention_mask, jnp.float32).reshape(-1)
    counts = jnp.zeros(num_experts, jnp.float32)
    probs = jnp.zeros(num_experts, jnp.float32)
    rows = jnp.zeros((), jnp.float32)
    for logits in router_logits:
        p = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)  # [N, E]
        chosen = jax.nn.one_hot(jax.lax.top_k(p, top_k)[1], num_experts).sum(1)  # [N, E]
        if mask is not None:
            chosen, p = chosen * mask[:, None], p * mask[:, None]
        counts, probs = counts + chosen.sum(0), probs + p.sum(0)
        rows = rows + (p.shape[0] if mask is None else mask.sum())
    return num_experts * jnp.sum((counts / rows) * (probs / rows))


class MoeCausalLMOutput(NamedTuple):
    """``forward(..., output_router_logits=True)``: the logits, transformers' ``aux_loss``
    (unscaled: the training loss adds ``router_aux_loss_coef * aux_loss``) and each sparse
    layer's router logits ``[B * L, E]``."""

    logits: jax.Array
    aux_loss: jax.Array
    router_logits: tuple[jax.Array, ...]


# ---------------------------------------------------------------------------------------------
# Models


def _uniform(shape: tuple[int, ...], fan_in: int, rngs: Rngs) -> Parameter:
    bound = 1.0 / math.sqrt(fan_in)
    weight = Parameter(jnp.zeros(shape, jnp.float32))
    nn.init.uniform_(weight, -bound, bound, rngs=rngs)
    return weight


class _ExpertFiles(PreTrainedModel):
    """Reads transformers' per-expert tensors stacked (the config's ``expert_file_names``)."""

    @classmethod
    def weights_view(cls, weights: Any) -> Any:
        """The per-expert tensors of transformers' files, stacked (``ExpertStacks``)."""
        config = cls.config_class
        assert issubclass(config, MoeConfig), config  # the MoE classes read MoE configs
        return ExpertStacks(weights, config.expert_file_names)


class MoeModel(_ExpertFiles, DecoderModel):
    """A decoder of ``MoeDecoderLayer`` blocks (see ``DecoderModel.forward``)."""

    layer_class = MoeDecoderLayer

    def _checkpointed(self, training: bool, cache: Any) -> Callable[..., Any] | None:
        """The skeleton's ``js.remat`` per block; while router logits are collected, each
        checkpointed block returns its own beside its output."""
        plain = super()._checkpointed(training, cache)
        if plain is None:
            return None

        def block_and_logits(block: Module, hidden: Any, *args: Any, **kwargs: Any) -> Any:
            with collect_router_logits() as logits:
                out = block(hidden, *args, **kwargs)
            return out, tuple(logits)

        with_logits = remat(block_and_logits, self._checkpoint_policy)

        def run(block: Module, hidden: Any, *args: Any, **kwargs: Any) -> Any:
            collected = _ROUTER_LOGITS.get()
            if collected is None:
                return plain(block, hidden, *args, **kwargs)
            out, logits = with_logits(block, hidden, *args, **kwargs)
            collected.extend(logits)
            return out

        return run


class MoeForCausalLM(_ExpertFiles, DecoderForCausalLM):
    """A sparse decoder and its head; ``output_router_logits=True`` also returns the router
    logits and the load-balancing loss (``MoeCausalLMOutput``)."""

    def forward(self, *args: Any, output_router_logits: bool = False, **kwargs: Any) -> Any:
        """Logits ``[B, L, vocab]`` (arguments as ``DecoderForCausalLM.forward``); with
        ``output_router_logits=True`` a ``MoeCausalLMOutput(logits, aux_loss, router_logits)``,
        ``aux_loss`` over the tokens of ``attention_mask``, as transformers computes it."""
        if not output_router_logits:
            return super().forward(*args, **kwargs)
        named = inspect.signature(self.forward).bind(*args, **kwargs).arguments
        with collect_router_logits() as collected:
            logits = super().forward(*args, **kwargs)
        experts, top_k = self.config.routed_experts(), self.config.num_experts_per_tok
        aux = load_balancing_loss(collected, experts, top_k, named.get("attention_mask"))
        return MoeCausalLMOutput(logits, aux, tuple(collected))


# ---------------------------------------------------------------------------------------------
# Loading per-expert files; sharding


class ExpertStacks:
    """A folder's tensors (``_Weights``) with each layer's per-expert matrices presented as
    the stacked tensors the model holds: ``prefix.experts.N.<name>.weight`` for every expert
    ``N`` and each ``name`` of ``names[stacked]`` becomes ``prefix.experts.<stacked>``
    ``[E, rows of the names together, cols]``. A read of a slice of experts (a sharded load)
    reads those experts' tensors only.

    Args:
        weights: the folder's tensors (``shapes``, ``dtypes``, ``read(key, index)``, ``close``).
        names: e.g. ``{"gate_up_proj": ("w1", "w3"), "down_proj": ("w2",)}`` (Mixtral).
    """

    def __init__(self, weights: Any, names: Mapping[str, tuple[str, ...]]):
        self.weights = weights
        wanted = {name: stacked for stacked, parts in names.items() for name in parts}
        pattern = re.compile(
            r"^(.*\.experts)\.(\d+)\.(" + "|".join(map(re.escape, wanted)) + r")\.weight$"
        )
        found: dict[tuple[str, str], dict[int, str]] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, str] = {}
        for key, shape in weights.shapes.items():
            match = pattern.match(key)
            if match is None:
                self.shapes[key], self.dtypes[key] = shape, weights.dtypes[key]
            else:
                prefix, expert, name = match.groups()
                found.setdefault((prefix, name), {})[int(expert)] = key
        self.stacks: dict[str, list[list[str]]] = {}  # stacked key -> per part, per expert
        for prefix in sorted({prefix for prefix, _ in found}):
            count = 1 + max(max(experts) for (p, _), experts in found.items() if p == prefix)
            for stacked, parts in names.items():
                self._stack(prefix, stacked, [found.get((prefix, n), {}) for n in parts], count)

    def _stack(self, prefix: str, stacked: str, parts: list[dict[int, str]], count: int) -> None:
        key = f"{prefix}.{stacked}"
        complete = [sorted(part) == list(range(count)) for part in parts]
        if not all(complete):
            raise ValueError(
                f"from_pretrained: the folder's per-expert tensors of {key!r} are incomplete: "
                f"experts {[sorted(part) for part in parts]} of {count}. Fix: copy every shard "
                "of the checkpoint into the folder"
            )
        keys = [[part[e] for e in range(count)] for part in parts]
        first = [self.weights.shapes[row[0]] for row in keys]
        odd = [
            k
            for row, first_shape in zip(keys, first, strict=True)
            for k in row
            if self.weights.shapes[k] != first_shape
        ]
        dtypes = {self.weights.dtypes[k] for row in keys for k in row}
        if odd or len(dtypes) != 1 or len({shape[1:] for shape in first}) != 1:
            raise ValueError(
                f"from_pretrained: the per-expert tensors of {key!r} differ in shape or dtype "
                f"(dtypes {sorted(dtypes)}; odd shapes {odd[:3]}). Fix: write the folder again"
            )
        self.stacks[key] = keys
        self.shapes[key] = (count, sum(shape[0] for shape in first), *first[0][1:])
        self.dtypes[key] = dtypes.pop()

    def read(self, key: str, index: tuple[slice, ...] | None = None) -> np.ndarray:
        """The tensor ``key`` (or its slice ``index``), a stacked one from its experts'."""
        if key not in self.stacks:
            return self.weights.read(key, index)
        shape = self.shapes[key]
        index = tuple(index or ()) + (slice(None),) * (len(shape) - len(index or ()))
        (e0, e1, es), (r0, r1, rs) = (
            s.indices(n) for s, n in zip(index[:2], shape[:2], strict=True)
        )
        if rs != 1:  # a strided row slice: the whole rows of each expert, then the slice
            r0, r1 = 0, shape[1]
        experts = []
        for e in range(e0, e1, es):
            pieces, offset = [], 0
            for row in self.stacks[key]:
                rows = self.weights.shapes[row[e]][0]
                lo, hi = max(r0, offset), min(r1, offset + rows)
                if lo < hi:
                    part = (slice(lo - offset, hi - offset), *index[2:])
                    pieces.append(self.weights.read(row[e], part))
                offset += rows
            experts.append(np.concatenate(pieces, axis=0))
        out = np.stack(experts)
        return out[:, index[1]] if rs != 1 else out

    def close(self) -> None:
        self.weights.close()


def expert_rules(axis: str = "expert") -> list[tuple[str, PartitionSpec]]:
    """``js.shard`` (and ``from_pretrained(mesh=, rules=)``) rules splitting every layer's
    stacked experts over the mesh axis ``axis``: each device holds ``E / size`` whole experts.

    Example:
        >>> from js.models._moe import expert_rules
        >>> expert_rules()[0]
        ('*.mlp.experts.gate_up_proj', P('expert', None, None))
    """
    spec = PartitionSpec(axis, None, None)
    return [("*.mlp.experts.gate_up_proj", spec), ("*.mlp.experts.down_proj", spec)]


__all__ = [
    "ROUTER_DEFAULTS",
    "SPARSE_LAYER_DEFAULTS",
    "ExpertStacks",
    "Experts",
    "MoeCausalLMOutput",
    "MoeConfig",
    "MoeDecoderLayer",
    "MoeExperts",
    "MoeForCausalLM",
    "MoeModel",
    "Routing",
    "SparseMoeBlock",
    "collect_router_logits",
    "expert_rules",
    "experts_blocked",
    "experts_dispatch",
    "experts_gather",
    "experts_grouped",
    "experts_looped",
    "load_balancing_loss",
]
