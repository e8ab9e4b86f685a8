"""ScannedStack: identical blocks run by one ``lax.scan`` over their stacked parameters.

A stack of N blocks unrolled into one program traces N copies of the block; a scan traces one
loop body, and with ``remat=True`` (each block checkpointed inside the loop) keeps one block's
activations at a time in the backward pass, which unrolled ``jax.checkpoint`` did not achieve
on XLA:CPU (issue 22: 12 blocks of width 256, temporary memory 0.31x of the plain step's). The
loop's compile time hardly grows with depth while the unrolled program's does; at 12 blocks
which is faster depends on the shapes (``tools/bench/finetune.py``: 1.8 s scanned against 1.1 s
unrolled at batch 8, sequence 128, width 256; 2.2 s against 9.3 s at batch 2, sequence 16,
width 64, and 6.0 s against 319 s for 48 of those blocks). The 60 s compilations that prompted
the issue came from LayerNorm's autodiff backward, since replaced.

The blocks stay what they are: a ``ModuleList`` of per-layer modules, so ``state_dict`` names
(``<path>.0.weight``), weight files, optimizers and ``load_state_dict`` are those of the
unrolled list. Each call stacks the per-layer arrays on a leading axis (one copy of the
parameters per step, and the gradient's transpose slices them back); storing stacked
parameters instead would change every name and every optimizer's view of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from js import Module, ModuleList
from js._flax import static_attributes
from js._remat import resolve_policy
from js._stateful import lay_out_call, read, state_variables

from ._checks import check_bool, check_int


def _first_difference(a: Module, b: Module) -> str:
    """Where two blocks' structures differ: a path and what differs there."""
    nodes_a, nodes_b = list(nnx.iter_graph(a)), list(nnx.iter_graph(b))
    for (path_a, node_a), (path_b, node_b) in zip(nodes_a, nodes_b, strict=False):
        where = ".".join(map(str, path_a)) or "the block"
        if path_a != path_b or type(node_a) is not type(node_b):
            return f"{where}: {type(node_a).__name__} against {type(node_b).__name__}"
        if isinstance(node_a, nnx.Pytree):
            static_a, static_b = static_attributes(node_a), static_attributes(node_b)
            for name in sorted(set(static_a) | set(static_b)):
                if static_a.get(name) != static_b.get(name):
                    return (
                        f"{where}: attribute {name!r} is {static_a.get(name)!r} against "
                        f"{static_b.get(name)!r}"
                    )
    return "their module graphs (different children or shared submodules)"


class ScannedStack(ModuleList):
    """A stack of identical blocks applied in turn by one ``jax.lax.scan``.

    ``stack(x, *args, **kwargs)`` computes ``x = block(x, *args, **kwargs)`` for each block in
    order, as the loop over an unrolled ``ModuleList`` does, but traces one block:
    the per-layer Parameters and Buffers are stacked on a leading axis and scanned over.
    ``x`` (an array or a pytree of arrays) is the carry: each block must return it with the
    same shapes and dtypes. The other arguments are given to every block: arrays (a mask) as
    they are, ``js.Rngs`` and other stateful objects threaded through the loop (dropout draws
    new masks in every layer, as unrolled). Buffers a block changes (BatchNorm's running
    statistics) are written back to each layer.

    The blocks remain children ``0 .. N-1``: ``state_dict`` names, weight files and optimizers
    are those of the unrolled ``ModuleList`` (``h.0.attn.weight``), so weights load from one
    into the other. Each call stacks the parameters (one copy per step). What it is for:
    ``remat=True`` cuts the training step's temporary memory (0.31x for 12 transformer blocks
    on XLA:CPU), and the program does not grow with depth; on XLA:CPU the loop compiled slower
    than the unrolled blocks, and a plain scan keeps as much memory as they do.

    Args:
        blocks: the blocks (a ``ModuleList`` or any iterable of modules of one structure: same
            classes, same static attributes, same shapes and dtypes), or a factory
            ``block(index) -> Module`` called ``num_layers`` times.
        num_layers: the count, with a factory.
        remat: checkpoint each block inside the loop (``js.remat``): activations are recomputed
            in the backward pass and one block's are kept at a time.
        policy: the ``js.remat`` policy with ``remat=True`` (None, a
            ``jax.checkpoint_policies`` function or its name).
        prevent_cse: ``jax.checkpoint``'s; False (default) is safe inside a scan.
        unroll: ``jax.lax.scan``'s ``unroll``.

    Shape:
        ``x`` of any shape the blocks keep; output the same.

    Example:
        >>> import jax.numpy as jnp, js, js.nn as nn
        >>> rngs = js.Rngs(params=0)
        >>> stack = nn.ScannedStack(lambda i: nn.Linear(4, 4, rngs=rngs), 3, remat=True)
        >>> stack(jnp.ones((2, 4))).shape, list(stack.state_dict())[:2]
        ((2, 4), ['0.weight', '0.bias'])
    """

    def __init__(
        self,
        blocks: Iterable[Module] | Callable[[int], Module],
        num_layers: int | None = None,
        *,
        remat: bool = False,
        policy: str | Callable[..., Any] | None = None,
        prevent_cse: bool = False,
        unroll: int | bool = 1,
    ):
        if callable(blocks) and not isinstance(blocks, Module):
            if num_layers is None:
                raise TypeError(
                    "ScannedStack: given a block factory, num_layers is required. Fix: "
                    "ScannedStack(make_block, num_layers)"
                )
            count = check_int("ScannedStack", "num_layers", num_layers)
            factory = blocks
            blocks = [factory(i) for i in range(count)]
        elif isinstance(blocks, Module) and not isinstance(blocks, ModuleList):
            raise TypeError(
                f"ScannedStack: expected a ModuleList or an iterable of blocks, got a single "
                f"{type(blocks).__name__}. Fix: ScannedStack([block, ...]) or "
                "ScannedStack(make_block, num_layers)"
            )
        else:
            blocks = list(blocks)
            if num_layers is not None and num_layers != len(blocks):
                raise ValueError(
                    f"ScannedStack: num_layers={num_layers} but {len(blocks)} blocks were given. "
                    "Fix: leave num_layers out when passing the blocks"
                )
        if not blocks:
            raise ValueError("ScannedStack: no blocks. Fix: pass at least one block")
        for index, block in enumerate(blocks):
            if not isinstance(block, Module):
                raise TypeError(
                    f"ScannedStack: block {index} must be a js Module, got {type(block).__name__}"
                )
        super().__init__(blocks)
        self.remat = check_bool("ScannedStack", "remat", remat)
        self.policy = resolve_policy(policy)
        self.prevent_cse = check_bool("ScannedStack", "prevent_cse", prevent_cse)
        self.unroll = unroll
        self._layers()  # refuse blocks of different structures now

    def _layers(self) -> tuple[Any, list[list[nnx.Variable]]]:
        """The blocks' common graph definition and each block's Variables, in one order."""
        blocks = list(self)
        graphdef, layers, seen = None, [], {}
        for index, block in enumerate(blocks):
            this, flat = nnx.flatten(block, with_paths=True)
            variables = state_variables(flat, "ScannedStack")
            if graphdef is None:
                graphdef = this
            elif this != graphdef:
                raise ValueError(
                    f"ScannedStack: block {index} differs in structure from block 0 "
                    f"({_first_difference(blocks[0], block)}); a scan runs one block's program "
                    "for every layer. Fix: build the blocks alike (state that differs per layer "
                    "must be a Parameter or Buffer), or use a ModuleList"
                )
            for (path, variable), first in zip(flat, layers[0] if layers else [], strict=False):
                a, b = variable.get_raw_value(), first.get_raw_value()
                if jnp.shape(a) != jnp.shape(b) or jnp.result_type(a) != jnp.result_type(b):
                    where = ".".join(map(str, path))
                    raise ValueError(
                        f"ScannedStack: {index}.{where} has shape {list(jnp.shape(a))} and dtype "
                        f"{jnp.result_type(a)}, block 0's {list(jnp.shape(b))} and "
                        f"{jnp.result_type(b)}. Fix: give every block the same shapes and dtypes"
                    )
            for variable in variables:
                if id(variable) in seen:
                    raise ValueError(
                        f"ScannedStack: blocks {seen[id(variable)]} and {index} share a "
                        "Parameter or Buffer; stacked, each layer would get its own copy. Fix: "
                        "use a ModuleList for tied layers"
                    )
                seen[id(variable)] = index
            layers.append(variables)
        return graphdef, layers

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        graphdef, layers = self._layers()
        layout, extra_variables, dyn_args, dyn_kwargs = lay_out_call("ScannedStack", args, kwargs)
        stacked = [
            jnp.stack([layer[k].get_raw_value() for layer in layers]) for k in range(len(layers[0]))
        ]
        written: list[bool] = []
        extra_written: list[bool] = []
        given = jax.tree.map(lambda a: (jnp.shape(a), jnp.result_type(a)), x)

        def body(carry, layer_leaves):
            h, extra = carry
            block = nnx.unflatten(graphdef, layer_leaves)
            objects, call_args, call_kwargs = layout.rebuild(extra, dyn_args, dyn_kwargs)
            out = block(h, *call_args, **call_kwargs)
            got = jax.tree.map(lambda a: (jnp.shape(a), jnp.result_type(a)), out)
            if got != given:
                raise ValueError(
                    f"ScannedStack: a block returned {got} for an input {given}; the output of "
                    "one block is the input of the next, so it must keep its structure, shapes "
                    "and dtypes. Fix: return the hidden state alone, unchanged in shape"
                )
            this, new_leaves = nnx.flatten(block, with_paths=False)
            if this != graphdef:
                raise RuntimeError(
                    "ScannedStack: a block changed its structure or mode while traced. Fix: "
                    "make such changes outside the forward pass"
                )
            new_extra = layout.updated(objects, "ScannedStack", block)
            written[:] = [n is not o for n, o in zip(new_leaves, layer_leaves, strict=True)]
            extra_written[:] = [n is not o for n, o in zip(new_extra, extra, strict=True)]
            ys = [n for n, w in zip(new_leaves, written, strict=True) if w]
            return (out, new_extra), ys

        if self.remat:
            body = jax.checkpoint(body, policy=self.policy, prevent_cse=self.prevent_cse)
        (x, extra), ys = jax.lax.scan(body, (x, read(extra_variables)), stacked, unroll=self.unroll)
        for variable, value, w in zip(extra_variables, extra, extra_written, strict=True):
            if w:
                variable.set_raw_value(value)
        changed = iter(ys)
        for k, w in enumerate(written):
            if w:
                values = next(changed)
                for index, layer in enumerate(layers):
                    layer[k].set_raw_value(values[index])
        return x

    def extra_repr(self) -> str:
        policy = getattr(self.policy, "__name__", self.policy)
        return f"{len(self)} layers, remat={self.remat}" + (f", policy={policy}" if policy else "")
