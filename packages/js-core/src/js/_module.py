"""The module object model: Module, ModuleList, ModuleDict, traversal and state dicts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import nnx
from jax.typing import ArrayLike

from . import _hooks
from ._checks import compare_state, load_error, tie_state
from ._flax import is_flax_attribute
from ._jax import EVAL_TRACE, TRACE_CTX  # which trace jax records now
from ._signature import ConstructorSignature
from ._stateful import instance_test
from ._variables import (
    Buffer,
    Parameter,
    ParameterSelection,
    TrackedList,
    _Tracked,
    check_state_dict,
    placed_like,
)


class _Keys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


class IncompatibleKeys(_Keys):
    """What a non-strict ``load_state_dict`` skipped, as in PyTorch: ``(missing_keys,
    unexpected_keys)``, a named 2-tuple (``missing, unexpected = model.load_state_dict(...)``).

    ``ignored_keys``, outside the tuple (so unpacking, equality and the repr stay PyTorch's),
    lists the entries a load left aside on purpose, never an error: js-nn's ``load_weights``
    puts there the file keys outside its ``prefix=`` (a classifier head next to the backbone
    asked for). Empty for ``load_state_dict`` itself.

    Example:
        >>> import js
        >>> keys = js.IncompatibleKeys([], ["head.bias"], ignored_keys=["pooler.dense.bias"])
        >>> missing, unexpected = keys
        >>> keys, keys.ignored_keys
        (IncompatibleKeys(missing_keys=[], unexpected_keys=['head.bias']), ['pooler.dense.bias'])
    """

    ignored_keys: list[str]

    def __new__(
        cls,
        missing_keys: list[str],
        unexpected_keys: list[str],
        ignored_keys: list[str] | None = None,
    ) -> IncompatibleKeys:
        self = super().__new__(cls, missing_keys, unexpected_keys)
        self.ignored_keys = list(ignored_keys or [])
        return self

    def __getnewargs__(self) -> tuple:  # copy and pickle keep ignored_keys
        return (*self, self.ignored_keys)


# A traversal of 10,000 variables spent half its time in isinstance's metaclass hook.
_holds_state = instance_test((nnx.Module, nnx.Variable))


def _contains_state(value: Any) -> bool:
    """A module or variable, or a (nested) list, tuple or dict holding one."""
    if _holds_state(value):
        return True
    if isinstance(value, (list, tuple)):
        return any(_contains_state(v) for v in value)
    if isinstance(value, dict) and not isinstance(value, nnx.Module):
        return any(_contains_state(v) for v in value.values())
    return False


def _as_container(value: Any) -> Any:
    """Lists/tuples and dicts holding modules become ModuleList/ModuleDict, recursively."""
    if isinstance(value, nnx.Module) or not _contains_state(value):
        return value
    if isinstance(value, (list, tuple)):
        return ModuleList([_as_container(v) for v in value])
    if isinstance(value, dict):
        return ModuleDict({k: _as_container(v) for k, v in value.items()})
    return value


class Module(_Tracked, _hooks.Hookable, nnx.Module):
    """Base class of every js layer and model.

    Subclass it, call ``super().__init__()``, create children and ``Parameter``/``Buffer``
    attributes in the constructor, implement ``forward``, and call the module as ``model(x)``.
    Assigning the same module to two attributes shares its weights. Plain lists, tuples and
    dicts of modules become ``ModuleList``/``ModuleDict`` on assignment, so they are discovered.

    Example:
        >>> import jax.numpy as jnp, js
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.weight = js.Parameter(jnp.ones(3))
        ...     def forward(self, x):
        ...         return x * self.weight.value
        >>> Scale()(jnp.arange(3.0)).tolist()
        [0.0, 1.0, 2.0]
    """

    # Set on every instance before __init__ runs (see _pytree_meta_construct), so that the graph
    # definition, where it is static data, is the same before and after the first train().
    training = True

    # inspect.signature(cls) shows cls.__init__'s parameters, not flax's metaclass __call__.
    __signature__ = ConstructorSignature()

    @classmethod
    def _pytree_meta_construct(cls, self, *args, **kwargs):
        object.__setattr__(self, "training", True)
        self.__init__(*args, **kwargs)

    def __init__(self):
        pass

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Every call is a named scope (the class name) in traced programs, so layers are named
        # in HLO metadata and profiles. Eagerly the scope names nothing and costs ~0.6 us (an
        # empty forward's call costs ~0.5 us), so it is entered only while JAX traces.
        if self._forward_pre_hooks or self._forward_hooks:
            return _hooks.call(self, args, kwargs, self._scoped_forward)
        if TRACE_CTX.trace is EVAL_TRACE:
            return self.forward(*args, **kwargs)
        with jax.named_scope(type(self).__name__):
            return self.forward(*args, **kwargs)

    def _scoped_forward(self, args: tuple, kwargs: dict):
        # __call__'s body, for the hooks' path (inlined there: a method call costs ~0.1 us)
        if TRACE_CTX.trace is EVAL_TRACE:
            return self.forward(*args, **kwargs)
        with jax.named_scope(type(self).__name__):
            return self.forward(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, _as_container(value))

    def register_buffer(self, name: str, array: ArrayLike, persistent: bool = True) -> None:
        """Add a ``Buffer`` attribute, as PyTorch's ``register_buffer`` does.

        Args:
            name: the attribute name (no ``'.'``).
            array: the buffer's array.
            persistent: ``False`` keeps the buffer out of ``state_dict`` (and so out of weight
                files and checkpoints), as in PyTorch; it stays module state.

        Example:
            >>> import jax.numpy as jnp, js
            >>> m = js.Module()
            >>> m.register_buffer("mask", jnp.ones((2, 2), bool), persistent=False)
            >>> m.register_buffer("count", jnp.zeros(()))
            >>> list(m.state_dict()), m.mask.persistent
            (['count'], False)
        """
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(
                f"register_buffer: name must be a non-empty string without '.', got {name!r}"
            )
        setattr(self, name, Buffer(array, persistent=persistent))

    # -- traversal ---------------------------------------------------------------------------

    def _named_members(self) -> Iterator[tuple[str, Any]]:
        """Direct children (modules and variables) in registration order."""
        for name, value in vars(self).items():
            if not is_flax_attribute(name) and _holds_state(value):
                yield name, value

    def _child_modules(self) -> Iterator[tuple[str, Module]]:
        # Every (name, child module), a child held under two names twice (torch's _modules).
        for name, value in self._named_members():
            if isinstance(value, Module):
                yield name, value

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """Yield ``(name, child)`` for each direct child module, a shared child once (as torch)."""
        seen: set[int] = set()
        for name, module in self._child_modules():
            if id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator[Module]:
        for _, module in self.named_children():
            yield module

    def named_modules(
        self, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """Yield ``(path, module)`` for this module and every descendant, depth first."""
        yield from self._walk(prefix, set() if remove_duplicate else None)

    def _walk(self, prefix: str, memo: set[int] | None):
        if memo is not None:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self._child_modules():
            yield from child._walk(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self) -> Iterator[Module]:
        for _, module in self.named_modules():
            yield module

    def _named_variables(self, kind: type | tuple[type, ...], remove_duplicate: bool = True):
        seen: set[int] = set()
        for module_path, module in self.named_modules(remove_duplicate=remove_duplicate):
            for name, value in module._named_members():
                if isinstance(value, kind) and (not remove_duplicate or id(value) not in seen):
                    seen.add(id(value))
                    yield (f"{module_path}.{name}" if module_path else name), value

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """Yield ``(path, Parameter)``; a shared Parameter appears once, at its first path."""
        return self._named_variables(Parameter)

    def named_buffers(self) -> Iterator[tuple[str, Buffer]]:
        return self._named_variables(Buffer)

    def parameters(self) -> ParameterSelection:
        """The live selection of this module's Parameters, for an optimizer (not copies)."""
        named = list(self.named_parameters())
        _, flat = nnx.flatten(self, with_paths=True)
        nnx_path = {id(leaf): ".".join(map(str, path)) for path, leaf in flat}
        return ParameterSelection(named, tuple(nnx_path[id(param)] for _, param in named))

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (False) or unfreeze (True) every Parameter of this module; returns self.

        PyTorch's ``Module.requires_grad_``: frozen Parameters get no gradient from
        ``js.value_and_grad`` and no optimizer state, and are never changed by a step, while
        ``state_dict`` and checkpoints still hold them. A structure change: the next ``js.jit``
        call traces again. Run it outside compiled code.

        Example:
            >>> import jax.numpy as jnp, js
            >>> class Affine(js.Module):
            ...     def __init__(self):
            ...         super().__init__()
            ...         self.weight = js.Parameter(jnp.ones(2))
            ...         self.bias = js.Parameter(jnp.zeros(2))
            >>> class Net(js.Module):
            ...     def __init__(self):
            ...         super().__init__()
            ...         self.backbone, self.head = Affine(), Affine()
            >>> model = Net()
            >>> _ = model.backbone.requires_grad_(False)
            >>> [name for name, p in model.named_parameters() if p.requires_grad]
            ['head.weight', 'head.bias']
        """
        for _, param in self.named_parameters():
            param.requires_grad = requires_grad
        return self

    def buffers(self) -> Iterator[Buffer]:
        for _, buffer in self.named_buffers():
            yield buffer

    def apply(self, fn: Callable[[Module], object]) -> Module:
        """Call ``fn`` on every child (recursively, children first), then on self; returns self.

        PyTorch's ``Module.apply``: the usual way to re-initialise weights by layer type.
        A child shared by two parents is visited once per parent, as in PyTorch. Run it
        outside compiled code; ``fn`` may replace arrays (``js.nn.init``) and attributes.

        Example:
            >>> import jax.numpy as jnp, js
            >>> class Pair(js.Module):
            ...     def __init__(self):
            ...         super().__init__()
            ...         self.left, self.right = js.Module(), js.Module()
            >>> visited = []
            >>> _ = Pair().apply(lambda m: visited.append(type(m).__name__))
            >>> visited
            ['Module', 'Module', 'Pair']
        """
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # -- modes -------------------------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Set training mode on this module and every descendant; returns self.

        It changes what stochastic and normalization layers do, not whether gradients flow.
        Switch modes outside compiled code: the next ``js.jit`` call traces anew.
        """
        for module in self.modules():
            module.training = bool(mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode recursively (``train(False)``); returns self."""
        return self.train(False)

    # -- state dicts -------------------------------------------------------------------------

    def _state_variables(self) -> dict[str, Parameter | Buffer]:
        # What state_dict holds and load_state_dict expects: Parameters and persistent Buffers
        # (a non-persistent Buffer is module state but, as in PyTorch, never saved). Like
        # PyTorch, every path of a shared tensor is a key of the state dict. One plain recursion
        # in _named_variables' order (a module's own variables, then each child's): its nested
        # generators took twice as long, and a checkpoint load walks the model twice.
        found: dict[str, Parameter | Buffer] = {}
        self._collect_state("", found)
        return found

    def _collect_state(self, prefix: str, found: dict) -> None:
        members = list(self._named_members())
        for name, value in members:
            if isinstance(value, Parameter) or (isinstance(value, Buffer) and value.persistent):
                found[prefix + name] = value
        for name, value in members:
            if isinstance(value, Module):
                value._collect_state(f"{prefix}{name}.", found)

    def state_dict(self, *, as_numpy: bool = True) -> dict[str, np.ndarray]:
        """Independent NumPy copies of every Parameter and persistent Buffer, by dotted path.

        A buffer made with ``persistent=False`` is left out, as in PyTorch.

        With ``as_numpy=False``, the live ``jax.Array`` of each entry instead (no copy, on its
        devices and sharding): what a sharded checkpoint saves.
        """
        variables = self._state_variables()
        if not as_numpy:
            return {path: variable.get_raw_value() for path, variable in variables.items()}
        return {path: np.array(v.get_raw_value(), copy=True) for path, v in variables.items()}

    def load_state_dict(
        self, state_dict: Mapping[str, ArrayLike], strict: bool = True
    ) -> IncompatibleKeys:
        """Copy arrays from ``state_dict`` into this module, all or nothing.

        Every path, shape and dtype is checked before anything is copied; one error lists every
        problem. With ``strict=False`` missing and unexpected keys are skipped and returned;
        shape and dtype mismatches are still errors. A ``jax.Array`` entry is not copied
        through the host; every array lands on its variable's current devices and sharding.

        A Parameter held under several paths (tied weights: ``lm_head.weight`` is
        ``embed.weight``) is supplied by any one of them; the others are not missing, as
        Hugging Face files store a tied weight once. Given under two paths, the values must be
        equal (an error names both otherwise).

        Example:
            >>> import jax.numpy as jnp, js
            >>> class Tied(js.Module):
            ...     def __init__(self):
            ...         super().__init__()
            ...         self.embed = js.Parameter(jnp.zeros(2))
            ...         self.head = self.embed
            >>> model = Tied()
            >>> list(model.state_dict())
            ['embed', 'head']
            >>> model.load_state_dict({"embed": jnp.ones(2)})
            IncompatibleKeys(missing_keys=[], unexpected_keys=[])
            >>> model.head.value.tolist()
            [1.0, 1.0]
        """
        owner = type(self).__name__
        arrays = check_state_dict(state_dict, owner)
        targets = self._state_variables()
        current = {path: variable.get_raw_value() for path, variable in targets.items()}
        missing, unexpected, mismatched = compare_state(current, arrays)
        filled, differing = tie_state(targets, arrays)
        if filled:
            missing = [path for path in missing if path not in filled]
        error = load_error(
            owner, missing, unexpected, mismatched, strict=strict, differing=differing
        )
        if error is not None:
            raise error
        paths, loaded = [], set()
        for path, variable in targets.items():
            if path in arrays and id(variable) not in loaded:  # a tied variable loads once
                loaded.add(id(variable))
                paths.append(path)
        values = placed_like([arrays[path] for path in paths], [current[path] for path in paths])
        for path, value in zip(paths, values, strict=True):
            targets[path].value = value
        return IncompatibleKeys(missing, unexpected)

    # -- printing ----------------------------------------------------------------------------

    def extra_repr(self) -> str:
        """One line of configuration shown by ``print(module)``; layers override it."""
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, value in self._named_members():
            text = repr(value).replace("\n", "\n  ")
            lines.append(f"({name}): {text}")
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    __str__ = __repr__


class ModuleList(Module, TrackedList):
    """A list of modules whose entries are registered children (paths ``name.0``, ``name.1``)."""

    def __init__(self, modules: Iterable[Any] | None = None):
        TrackedList.__init__(self, [_as_container(m) for m in (modules or ())])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ModuleList(TrackedList.__getitem__(self, index))
        return TrackedList.__getitem__(self, index)

    def __add__(self, other) -> ModuleList:
        return ModuleList([*self, *other])

    def extend(self, modules: Iterable[Any]) -> ModuleList:
        for module in modules:
            self.append(module)
        return self

    def _named_members(self):
        for index in range(len(self)):
            value = getattr(self, str(index))  # where nnx.List keeps entry ``index``
            if _holds_state(value):
                yield str(index), value

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "ModuleList has no forward(): iterate over it in your module's forward, "
            "or use nn.Sequential to chain layers"
        )


class ModuleDict(Module):
    """A dict of modules, keyed by strings, whose entries are registered children."""

    def __init__(self, modules: Mapping[str, Any] | None = None):
        self._keys: tuple[str, ...] = ()
        for key, module in dict(modules or {}).items():
            self[key] = _as_container(module)

    def __setitem__(self, key: str, module) -> None:
        if not isinstance(key, str):
            raise TypeError(f"ModuleDict keys must be strings, got {type(key).__name__}")
        if "." in key or not key:
            raise KeyError(f"ModuleDict key {key!r} must be a non-empty name without '.'")
        if key not in self._keys and (key.startswith("_") or hasattr(self, key)):
            raise KeyError(f"ModuleDict key {key!r} clashes with an attribute; choose another name")
        setattr(self, key, module)
        if key not in self._keys:
            self._keys = (*self._keys, key)

    def __getitem__(self, key: str):
        if key not in self._keys:
            raise KeyError(f"ModuleDict has no key {key!r}; keys: {list(self._keys)}")
        return getattr(self, key)

    def __delitem__(self, key: str) -> None:
        self[key]  # raises the KeyError above when missing
        delattr(self, key)
        self._keys = tuple(k for k in self._keys if k != key)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):
        return iter(list(self._keys))

    def keys(self) -> list[str]:
        return list(self._keys)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self._keys else default

    def pop(self, key: str) -> Any:
        module = self[key]
        del self[key]
        return module

    def update(self, modules: Mapping[str, Any]) -> None:
        for key, module in dict(modules).items():
            self[key] = module

    def values(self) -> list[Any]:
        return [getattr(self, key) for key in self._keys]

    def items(self) -> list[tuple[str, Any]]:
        return [(key, getattr(self, key)) for key in self._keys]

    def _named_members(self):
        return iter(self.items())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleDict has no forward(): index it in your module's forward")
