"""``summary``: a table of modules, output shapes and parameter counts, like torchinfo."""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import numpy as np
from flax import nnx

from js import Module


def _shapes(output) -> str:
    leaves = jax.tree.leaves(output)
    shapes = [list(np.shape(leaf)) for leaf in leaves]
    if not shapes:
        return "-"
    return str(shapes[0]) if len(shapes) == 1 else ", ".join(map(str, shapes))


@contextlib.contextmanager
def _recording(model: Module, rows: list):
    """Hooks on every module of ``model`` that record each call, in call order: a row is added
    when the call starts (so a parent comes before its children) and gets its output shape
    when the call returns. The hooks are removed on exit, whatever happened."""
    running: dict[int, list] = {}  # per module, the rows of its calls still running (recursion)

    def started(module, args):
        row = [module, None]
        rows.append(row)
        running.setdefault(id(module), []).append(row)

    def returned(module, args, output):
        running[id(module)].pop()[1] = _shapes(output)

    handles = []
    try:
        for module in model.modules():
            handles.append(module.register_forward_pre_hook(started))
            handles.append(module.register_forward_hook(returned))
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _restoring(*trees):
    """Put back, on exit, every Variable (parameters, buffers such as BatchNorm's running
    statistics, ``Rngs`` counters) of the js/flax objects in ``trees``: the run is undone."""
    nodes = [
        leaf
        for leaf in jax.tree.leaves(trees, is_leaf=lambda v: isinstance(v, nnx.Pytree))
        if isinstance(leaf, nnx.Pytree)
    ]
    # A State holds the Variables themselves: map it to new ones holding today's values.
    saved = [jax.tree.map(lambda value: value, nnx.state(node)) for node in nodes]
    try:
        yield
    finally:
        for node, state in zip(nodes, saved, strict=True):
            nnx.update(node, state)


def _count(module: Module) -> int:
    # Parameters held directly by this module (children count on their own rows).
    return sum(
        int(np.size(param.value)) for path, param in module.named_parameters() if "." not in path
    )


def summary(model: Module, *example_inputs: Any, **kwargs: Any) -> str:
    """Run ``model(*example_inputs, **kwargs)`` once, eagerly, and tabulate what was called.

    The run has no lasting effect: the model is called in its current mode (so shapes are
    those of training or evaluation as set), then every Variable it changed is put back:
    BatchNorm's running statistics, ``Rngs`` counters (the model's own and any ``rngs`` passed
    in ``example_inputs``/``kwargs``), parameters.

    Each row is one call of a module of ``model`` (forward hooks, registered for the run and
    removed after it), in call order, indented by depth: its path and type, its
    output shape(s), and the number of parameters it holds directly (children count on their
    own rows, so the column adds up to the total). Below it, as torchinfo prints them: the
    total, trainable and frozen (``requires_grad=False``) parameter counts and the buffer
    elements. The table is printed and returned.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> model = js.nn.Sequential(js.nn.Linear(4, 8, rngs=js.Rngs(params=0)), js.nn.ReLU())
        >>> text = js.nn.summary(model, jnp.ones((2, 4)))  # doctest: +ELLIPSIS
        =...
        Layer (type)...
        ...
        >>> "Total params: 40" in text
        True
    """
    names = {id(module): path for path, module in model.named_modules()}
    rows: list = []
    with _restoring(model, example_inputs, kwargs), _recording(model, rows):
        model(*example_inputs, **kwargs)
    table = [("Layer (type)", "Output shape", "Param #")]
    for module, shape in rows:
        path = names[id(module)]
        depth = path.count(".") + 1 if path else 0
        label = "  " * depth + (f"{path}: " if path else "") + type(module).__name__
        table.append((label, shape or "-", f"{_count(module):,}"))
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    rule = "=" * (sum(widths) + 4)
    lines = [rule, _line(table[0], widths), rule, *(_line(r, widths) for r in table[1:]), rule]
    params = list(model.parameters())
    total = sum(int(np.size(p.value)) for p in params)
    trainable = sum(int(np.size(p.value)) for p in params if p.requires_grad)
    buffers = sum(int(np.size(b.value)) for b in model.buffers())
    lines += [f"Total params: {total:,}", f"Trainable params: {trainable:,}"]
    lines += [f"Non-trainable params: {total - trainable:,}", f"Buffer elements: {buffers:,}", rule]
    text = "\n".join(lines)
    print(text)
    return text


def _line(row, widths) -> str:
    return f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}}"
