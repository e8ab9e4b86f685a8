"""Every use of flax's private names, in one place, tied to ``flax>=0.12.8,<0.13``.

js builds on flax NNX's public surface (``nnx.flatten``/``nnx.unflatten``, ``nnx.iter_graph``,
``Variable.get_raw_value``/``set_raw_value``, ``nnx.RngStream``). Where that surface costs time
on js.jit's per-call path, or says nothing about an object's layout, js reads flax's private
names; each one is here, with the reason, and nowhere else in js. The pin in js-core's
``pyproject.toml`` (``flax>=0.12.8,<0.13``) is what makes them safe: before raising it, check
every name below against the new flax (``tests/test_flax_private.py`` checks that they exist).
"""

from __future__ import annotations

import operator

from flax import nnx

# A Variable's array lives in the slot ``_raw_value``. ``get_raw_value()`` is one more Python
# call per array, and ``set_raw_value()`` also checks the trace context of every Variable: on
# js.jit's per-call path (a tiny step reads and writes ~20 arrays) the slot itself is used.
get_raw = operator.attrgetter("_raw_value")
set_raw = nnx.Variable.__dict__["_raw_value"].__set__

_PYTREE_INTERNAL = "_pytree__"  # flax's own bookkeeping attributes on every nnx.Pytree


def is_flax_attribute(name: str) -> bool:
    """Whether ``name`` is one of flax's bookkeeping attributes of an ``nnx.Pytree``."""
    return name.startswith(_PYTREE_INTERNAL)


def static_attributes(node: nnx.Pytree) -> dict:
    """The attributes of ``node`` that its graph definition holds as static data (not nodes).

    flax 0.12 records, per Pytree, which attribute names are graph nodes in ``_pytree__nodes``.
    """
    nodes = node._pytree__nodes
    return {
        name: value
        for name, value in vars(node).items()
        if not is_flax_attribute(name) and not nodes.get(name, False)
    }


def init_rng_stream(stream: nnx.RngStream, key, count, *, tag: str) -> None:
    """Set up ``stream`` from a key and a counter already built, as ``RngStream.__init__`` does
    in flax 0.12 (which would build both with device ops: one compiled program each)."""
    stream.tag = tag
    stream.key = nnx.RngKey(key, tag=tag)
    stream.count = nnx.RngCount(count, tag=tag)
