"""``js.value_and_grad`` and ``js.grad``: differentiate a module's Parameters."""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Callable
from typing import Any

import flax.errors
import jax
from flax import nnx

from . import _hooks
from ._stateful import lay_out_call, read, write_back
from ._variables import Parameter

# flax's TraceContextError when a Variable made outside a transform is changed inside it
# (variablelib.Variable._check_can_update, flax 0.12): the Variable's type name after "mutate".
# The RNG state types name the case of a draw from an Rngs the function does not take.
_RNG_MUTATION = re.compile(
    rf"Cannot mutate ({'|'.join(t.__name__ for t in (nnx.RngCount, nnx.RngKey))}) "
    "from a different trace level"
)


# Which Parameter each gradient belongs to, for the gradient states this module returned:
# id(state) -> (a weak reference to the state, {id(Parameter): its dotted path in the state}).
# A tied Parameter has one gradient under one of its paths; an optimizer holding the Parameter
# finds it here whatever path it knows it by, as torch finds ``p.grad`` on the Parameter itself.
_OWNERS: dict[int, tuple[weakref.ref, dict[int, str]]] = {}


def gradient_owners(grads) -> dict[int, str] | None:
    """``{id(Parameter): path}`` for a gradient state ``js.value_and_grad``/``js.grad`` returned
    (None for any other mapping, such as one rebuilt by ``jax.tree.map``). The ids are those of
    the Parameters as they were differentiated: inside ``js.jit`` the ones of that trace."""
    entry = _OWNERS.get(id(grads))
    if entry is None or entry[0]() is not grads:
        return None
    return entry[1]


def _own(grads, owners: dict[int, str]) -> None:
    key = id(grads)
    _OWNERS[key] = (weakref.ref(grads, lambda _: _OWNERS.pop(key, None)), owners)


def _check_module(transform: str, module) -> None:
    if not isinstance(module, nnx.Module):
        raise TypeError(
            f"js.{transform}(fn)(module, ...) differentiates the Parameters of its first argument, "
            f"which must be a Module; got {type(module).__name__}. Fix: pass the module first."
        )


def _differentiate(fn, has_aux: bool, transform: str):
    """``(module, *args) -> ((loss, aux), grads)``: differentiate the module's Parameters.

    The call is laid out by ``_stateful`` (the module first, shared variables once), the
    module's Parameters become the differentiated input of a pure function, everything else
    (buffers, RNG counters, other modules) a passed-through input whose new values are written
    back afterwards. Attribute order is left as it was, so ``named_parameters`` keeps its order.
    """

    def run(module, *args, **kwargs):
        _check_module(transform, module)
        layout, variables, dyn_args, dyn_kwargs = lay_out_call(
            f"js.{transform}", (module, *args), kwargs
        )
        pairs = zip(layout.paths, variables, strict=True)
        # the trainable Parameters of the module; frozen ones pass through as constants, so the
        # program holds no backward pass into them and the gradient state no entry
        wrt = [path[0] == 0 and isinstance(v, Parameter) and v.requires_grad for path, v in pairs]

        def pure(diff, rest):
            diff_it, rest_it = iter(diff), iter(rest)
            ordered = [next(diff_it) if w else next(rest_it) for w in wrt]
            objects, call_args, call_kwargs = layout.rebuild(ordered, dyn_args, dyn_kwargs)
            with _hooks.recording(call_args, call_kwargs, f"js.{transform}") as recorder:
                out = fn(*call_args, **call_kwargs)
            if has_aux and not (isinstance(out, tuple) and len(out) == 2):
                raise TypeError(
                    f"js.{transform}(fn, has_aux=True): fn must return a pair (loss, aux), got "
                    f"{type(out).__name__}"
                )
            loss, aux = out if has_aux else (out, None)
            # hooks: recorded values leave as part of the aux output (none: aux unchanged)
            updated = layout.updated(objects, f"js.{transform}", fn)
            return loss, (recorder.attach(aux), updated)

        leaves = read(variables)
        diff = [x for x, w in zip(leaves, wrt, strict=True) if w]
        rest = [x for x, w in zip(leaves, wrt, strict=True) if not w]
        try:
            (loss, (aux, updated)), grads = jax.value_and_grad(pure, has_aux=True)(diff, rest)
        except flax.errors.TraceContextError as error:
            drawn = _RNG_MUTATION.match(str(error))  # other TraceContextErrors: as they are
            if drawn is None:
                raise
            raise TypeError(
                f"js.{transform}: {getattr(fn, '__qualname__', fn)} draws from a js.Rngs that is "
                "not one of its arguments (it closes over it, or over an object holding it); a "
                "draw advances the stream's counter, and state that the differentiated function "
                f"does not take cannot change inside the transform (flax: {drawn[0]}). Fix: pass "
                f"the Rngs as an argument, js.{transform}(loss)(model, rngs, x) with "
                "def loss(model, rngs, x): ... model(x, rngs=rngs); its counter then advances in "
                "place."
            ) from error
        write_back(variables, updated, keep=wrt)  # the Parameters themselves are not changed
        aux = _hooks.finish(aux, (module, *args), kwargs, f"js.{transform}")  # call the hooks
        paths = [p[1:] for p, w in zip(layout.paths, wrt, strict=True) if w]
        state = nnx.from_flat_state(list(zip(paths, grads, strict=True)))
        owned = [v for v, w in zip(variables, wrt, strict=True) if w]
        _own(state, {id(v): ".".join(map(str, p)) for v, p in zip(owned, paths, strict=True)})
        return (loss, aux), state

    return run


def value_and_grad(
    fn: Callable[..., Any] | None = None, *, has_aux: bool = False
) -> Callable[..., Any]:
    """``js.value_and_grad(fn)(module, *args)`` -> ``(loss, grads)``.

    Differentiates the trainable Parameters of the first argument only (not its Buffers, not
    RNG counters, not Parameters with ``requires_grad=False``); later arguments, a ``js.Rngs``
    or another module among them, pass through and are updated in place (an Rngs that ``fn``
    draws from must be one of them: one it closes over is refused with a TypeError).
    ``grads`` is an NNX state of arrays keyed by the module's trainable Parameter paths. With
    ``has_aux=True`` ``fn`` returns ``(loss, aux)`` and the result is ``((loss, aux), grads)``.
    """
    if fn is None:
        return functools.partial(value_and_grad, has_aux=has_aux)
    run = _differentiate(fn, has_aux, "value_and_grad")

    @functools.wraps(fn)
    def wrapped(module, *args, **kwargs):
        (loss, aux), grads = run(module, *args, **kwargs)
        return ((loss, aux), grads) if has_aux else (loss, grads)

    return wrapped


def grad(fn: Callable[..., Any] | None = None, *, has_aux: bool = False) -> Callable[..., Any]:
    """``js.grad(fn)(module, *args)`` -> grads (``(grads, aux)`` with ``has_aux``), as
    :func:`value_and_grad` without the value."""
    if fn is None:
        return functools.partial(grad, has_aux=has_aux)
    run = _differentiate(fn, has_aux, "grad")

    @functools.wraps(fn)
    def wrapped(module, *args, **kwargs):
        (_, aux), grads = run(module, *args, **kwargs)
        return (grads, aux) if has_aux else grads

    return wrapped
