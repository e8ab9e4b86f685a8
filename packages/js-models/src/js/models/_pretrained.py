"""Reading and writing model folders: ``config.json`` and safetensors weights.

Loading builds the model abstractly (``nnx.eval_shape`` of its constructor: shapes only, no
random initialisation) and fills each variable from the file, one tensor at a time, straight
to its devices (with a mesh: each device's slice only, read with safetensors' slicing). What
the file does not hold (non-persistent buffers such as rotary frequencies, RNG state, and with
``strict=False`` the missing keys) gets its real initial value from one compiled run of the
constructor that computes just those arrays. Everything is checked before anything is read.

A folder is either transformers' (``config.json`` with ``model_type`` and ``architectures``;
``model.safetensors`` or ``model.safetensors.index.json`` with its shards) or timm's
(``config.json`` with ``architecture``; ``model.safetensors``).
"""

from __future__ import annotations

import importlib
import json
import logging
import mmap
import os
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, NamedTuple, Protocol, cast

import jax
import jax.numpy as jnp
import numpy as np
import safetensors
import safetensors.numpy
from flax import nnx
from safetensors import safe_open

import js
from js import Parameter
from js._checks import check_mesh
from js._sharding import check_rules, place, plan_placement
from js.nn._keys import compile_key_mapping, plan_load, rename_key

from ._registry import MODEL_TYPES, TIMM_PREFIXES


class FamilyModel(Protocol):
    """What loading and saving read of a family's model class. ``_base.PreTrainedModel`` has
    all of it; it calls this module's loader, so this module describes it instead of
    importing it back."""

    config_class: ClassVar[type[Any]]  # a PretrainedConfig: model_type, from_dict
    base_model_prefix: ClassVar[str]
    key_mapping: ClassVar[dict[str, str]]
    save_key_mapping: ClassVar[dict[str, str]]
    ignore_on_load: ClassVar[tuple[str, ...]]

    def _config_json(self) -> dict[str, Any]: ...

    def _state_variables(self) -> Mapping[str, Any]: ...


_LOG = logging.getLogger("js.models")
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"
_ALIGN = 64  # bytes: the alignment XLA's CPU client needs to adopt a host buffer
_POPULATE_FROM = 1 << 16  # bytes: larger tensors get a mapping of their own
_CHUNK = 16 << 20  # bytes: a sliced read goes through blocks of rows of at most this size
_FLOAT_DTYPES = {"float32": jnp.float32, "float16": jnp.float16, "bfloat16": jnp.bfloat16}


class LoadingInfo(NamedTuple):
    """What ``from_pretrained`` did not load one to one (``js.models.loading_info(model)``).

    ``missing_keys``: model names the folder lacked (kept at their initial values; only with
    ``strict=False``). ``unexpected_keys``: file names the model has no place for (skipped; only
    with ``strict=False``). ``ignored_keys``: file names skipped by design: the head of a file
    loaded into its base model, and buffers the family computes (GPT-2's ``attn.bias``).
    """

    missing_keys: list[str]
    unexpected_keys: list[str]
    ignored_keys: list[str]


_INFO: weakref.WeakKeyDictionary[Any, LoadingInfo] = weakref.WeakKeyDictionary()


def loading_info(model: Any) -> LoadingInfo:
    """What ``from_pretrained`` skipped when it built ``model``.

    Args:
        model: a model returned by ``from_pretrained``.

    Returns:
        ``LoadingInfo(missing_keys, unexpected_keys, ignored_keys)``.

    Example:
        >>> js.models.loading_info(model).missing_keys  # doctest: +SKIP
        []
    """
    if model not in _INFO:
        raise KeyError(
            f"{type(model).__name__} was not built by from_pretrained, so there is no loading "
            "report. Fix: pass a model that from_pretrained returned"
        )
    return _INFO[model]


# -- the folder --------------------------------------------------------------------------------


def _folder(path: str | os.PathLike) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"from_pretrained: path must be a folder path (str or os.PathLike), got "
            f"{type(path).__name__}. Fix: pass the folder save_pretrained wrote"
        )
    folder = Path(path)
    if not folder.exists():
        raise FileNotFoundError(
            f"from_pretrained: {folder} does not exist. Nothing is downloaded: fix: pass a local "
            "folder holding config.json and model.safetensors (e.g. one huggingface_hub's "
            "snapshot_download or save_pretrained wrote)"
        )
    if not folder.is_dir():
        raise NotADirectoryError(
            f"from_pretrained: {folder} is a file, not a model folder. Fix: pass the folder that "
            "holds config.json and model.safetensors (for a bare weight file, build the model "
            "and use js.nn.load_weights)"
        )
    return folder


def _read_config(folder: Path) -> dict[str, Any]:
    file = folder / CONFIG_NAME
    if not file.is_file():
        raise FileNotFoundError(
            f"from_pretrained: {folder} has no {CONFIG_NAME}, which names the model family and "
            "its sizes. Fix: pass the folder save_pretrained wrote (transformers or timm)"
        )
    try:
        config = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(
            f"from_pretrained: {file} is not valid JSON ({error}). Fix: write it again"
        ) from None
    if not isinstance(config, dict):
        raise ValueError(f"from_pretrained: {file} holds a {type(config).__name__}, not an object")
    return config


def _supported() -> str:
    return (
        f"transformers model_type one of {sorted(MODEL_TYPES)}; timm architectures starting "
        f"with one of {sorted(TIMM_PREFIXES)}"
    )


def _family(config: Mapping[str, Any], folder: Path) -> tuple[str, str, str]:
    """``(family module, architecture name or "", "transformers"|"timm")`` of a config."""
    if "model_type" in config:
        model_type = config["model_type"]
        if model_type not in MODEL_TYPES:
            raise ValueError(
                f"from_pretrained: {folder / CONFIG_NAME} has model_type {model_type!r}, which "
                f"js.models does not implement. Supported: {_supported()}"
            )
        architectures = config.get("architectures") or [""]
        return MODEL_TYPES[model_type], str(architectures[0]), "transformers"
    if "architecture" in config:
        name = str(config["architecture"])
        prefixes = sorted((p for p in TIMM_PREFIXES if name.startswith(p)), key=len)
        if not prefixes:
            raise ValueError(
                f"from_pretrained: {folder / CONFIG_NAME} names the timm architecture {name!r}, "
                f"which js.models does not implement. Supported: {_supported()}"
            )
        return TIMM_PREFIXES[prefixes[-1]], name, "timm"
    raise ValueError(
        f"from_pretrained: {folder / CONFIG_NAME} has neither 'model_type' (transformers) nor "
        "'architecture' (timm), so its family is unknown. Fix: pass a folder transformers' or "
        "timm's save_pretrained wrote"
    )


def _module(name: str, folder: Path) -> ModuleType:
    try:
        return importlib.import_module(f"js.models.{name}")
    except ImportError as error:
        raise ValueError(
            f"from_pretrained: {folder} is a {name} model, but js.models.{name} cannot be "
            f"imported ({error}). Fix: install a js-models release that has it"
        ) from None


def _class_of(config: Mapping[str, Any], folder: Path) -> type[FamilyModel]:
    family, name, kind = _family(config, folder)
    module = _module(family, folder)
    classes: dict[str, Any] = module.ARCHITECTURES
    name = name or module.DEFAULT_ARCHITECTURE
    if name not in classes:
        what = "architectures[0]" if kind == "transformers" else "architecture"
        raise ValueError(
            f"from_pretrained: {folder / CONFIG_NAME} has {what} {name!r}, which js.models."
            f"{family} does not implement; it has {sorted(classes)}. Fix: load one of those "
            f"with its own from_pretrained (e.g. js.models.{family}."
            f"{module.DEFAULT_ARCHITECTURE}.from_pretrained(path) takes what it can use)"
        )
    return classes[name]


def _check_class(cls: type[FamilyModel], config: Mapping[str, Any], folder: Path) -> None:
    if cls.config_class.model_type and cls.config_class.model_type == config.get("model_type"):
        return  # the class's own kind of folder (also a family outside the registry)
    family, name, _ = _family(config, folder)
    own = cls.__module__.rsplit(".", 1)[-1]
    if own != family:
        found = config.get("model_type") or name
        raise ValueError(
            f"{cls.__name__}.from_pretrained: {folder} holds a {found!r} model "
            f"(js.models.{family}), not a {cls.config_class.model_type or own!r} one. Fix: "
            f"js.models.from_pretrained(path) picks the class for the folder"
        )


# -- the weights -------------------------------------------------------------------------------


class _Weights:
    """The tensors of a folder's weight files, read lazily (one tensor or slice at a time)."""

    def __init__(self, folder: Path):
        single, index = folder / WEIGHTS_NAME, folder / WEIGHTS_INDEX_NAME
        if single.is_file():
            files = [single]
            self.where: dict[str, Path] = {}
        elif index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise ValueError(
                    f"from_pretrained: {index} is not a safetensors index (a JSON object with "
                    f"'weight_map'): {error!r}. Fix: write the folder again"
                ) from None
            self.where = {key: folder / name for key, name in weight_map.items()}
            files = sorted(set(self.where.values()))
            absent = [str(f.name) for f in files if not f.is_file()]
            if absent:
                raise FileNotFoundError(
                    f"from_pretrained: {index} lists shards that are not in {folder}: {absent}. "
                    "Fix: copy every shard into the folder"
                )
        else:
            others = sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pth", ".pt"))
            hint = (
                f" It holds {others}: pickled PyTorch files, which js never unpickles (they can "
                "run code); convert them where you trust them (save_pretrained with "
                "safe_serialization, or safetensors.torch.save_file)."
                if others
                else ""
            )
            raise FileNotFoundError(
                f"from_pretrained: {folder} has no {WEIGHTS_NAME} or {WEIGHTS_INDEX_NAME}.{hint} "
                "Fix: pass a folder with safetensors weights"
            )
        self._files: dict[Path, Any] = {}
        self.offsets: dict[str, tuple[int, int]] = {}  # name -> (file offset, bytes)
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, str] = {}
        indexed = dict(self.where)
        for file in files:
            handle = self._open(file)
            for key in handle.keys():
                if indexed and indexed.get(key) != file:
                    continue  # a shard's stray key the index does not name
                info = handle.get_slice(key)
                self.shapes[key] = tuple(info.get_shape())
                self.dtypes[key] = info.get_dtype()
                self.where[key] = file
            self.offsets.update(_data_offsets(file))

    def _open(self, file: Path) -> Any:
        if file not in self._files:
            try:
                self._files[file] = safe_open(str(file), framework="numpy")
            except (safetensors.SafetensorError, OSError) as error:
                raise ValueError(
                    f"from_pretrained: {file} is not a readable safetensors file ({error}). "
                    "Fix: write or download it again"
                ) from None
        return self._files[file]

    def read(self, key: str, index: tuple[slice, ...] | None = None) -> np.ndarray:
        """The tensor ``key`` (or its slice ``index``) as a NumPy array of its own.

        Read with plain file reads, never through a memory map: the pages of a mapped file
        count against the process while it stays mapped, so a sharded load reading its slices
        from a map held the whole file's pages by the end. A slice is read a block of rows at
        a time (at most ``_CHUNK`` bytes beyond the slice itself).
        """
        shape = self.shapes[key]
        dtype = _ST_DTYPES.get(self.dtypes[key])
        if dtype is None or key not in self.offsets:  # a dtype NumPy lacks: safetensors' reader
            handle = self._open(self.where[key])
            return handle.get_tensor(key) if index is None else handle.get_slice(key)[index]
        dtype = np.dtype(dtype).newbyteorder("<")
        bounds = [(0, n) for n in shape]
        if index is not None and shape:
            steps = [s.indices(n) for s, n in zip(index, shape, strict=True)]
            if any(step != 1 for _, _, step in steps):
                return self._open(self.where[key]).get_slice(key)[index]
            bounds = [(start, max(start, stop)) for start, stop, _ in steps]
        out_shape = tuple(stop - start for start, stop in bounds)
        # Read straight into a buffer of its own: one copy from the page cache, and XLA on the
        # CPU adopts a page-aligned buffer instead of copying it again. The buffer's pages are
        # mapped in one call: faulting them in one by one cost 3x the read.
        out = _host_buffer(int(np.prod(out_shape)) * dtype.itemsize).view(dtype).reshape(out_shape)
        if out.size == 0:
            return out
        offset, _ = self.offsets[key]
        if not shape:
            self._read_into(key, offset, out.reshape(-1).view(np.uint8))
            return out
        row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize  # bytes of one row
        (first, last), inner = bounds[0], tuple(slice(a, b) for a, b in bounds[1:])
        if all(b - a == n for (a, b), n in zip(bounds[1:], shape[1:], strict=True)):
            # whole rows: one read of the contiguous block, straight into the result
            self._read_into(key, offset + first * row, out.reshape(-1).view(np.uint8))
            return out
        rows = max(1, _CHUNK // max(row, 1))
        for start in range(first, last, rows):
            stop = min(last, start + rows)
            block = np.empty((stop - start) * row, np.uint8)
            self._read_into(key, offset + start * row, block)
            block_rows = block.view(dtype).reshape((stop - start, *shape[1:]))
            out[start - first : stop - first] = block_rows[(slice(None), *inner)]
        return out

    def _read_into(self, key: str, offset: int, buffer: np.ndarray) -> None:
        """Fill ``buffer`` (bytes) from ``key``'s file at ``offset``."""
        view, done = buffer.data, 0
        with open(self.where[key], "rb", buffering=0) as file:
            file.seek(offset)
            while done < buffer.size:
                got = file.readinto(view[done:])
                if not got:
                    raise ValueError(
                        f"from_pretrained: {self.where[key]} ends inside tensor {key!r} "
                        "(truncated?). Fix: write or download it again"
                    )
                done += got

    def close(self) -> None:
        self._files.clear()  # safe_open handles unmap when collected


def _host_buffer(size: int) -> np.ndarray:
    """``size`` writable, page-aligned bytes, their pages already mapped where Linux can."""
    if size < _POPULATE_FROM:
        raw = np.empty(size + _ALIGN, np.uint8)
        skip = -raw.ctypes.data % _ALIGN
        return raw[skip : skip + size]
    flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0) | getattr(mmap, "MAP_POPULATE", 0)
    return np.frombuffer(mmap.mmap(-1, size, flags=flags), np.uint8)


def _data_offsets(file: Path) -> dict[str, tuple[int, int]]:
    """``{name: (offset in the file, bytes)}`` from a safetensors header (8 bytes of its
    length, then JSON; safe_open has already validated it)."""
    with open(file, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(length))
    return {
        name: (
            8 + length + entry["data_offsets"][0],
            entry["data_offsets"][1] - entry["data_offsets"][0],
        )
        for name, entry in header.items()
        if name != "__metadata__"
    }


# -- matching names ----------------------------------------------------------------------------


class _Plan(NamedTuple):
    source: dict[str, str]  # model path (the variable's first path) -> file key
    missing: list[str]
    unexpected: list[str]
    ignored: list[str]  # skipped by design (reported, not errors)
    mismatched: list[str]


def _plan_keys(
    cls: type[FamilyModel],
    model: Any,
    variables: Mapping[str, Any],
    weights: _Weights,
    strict: bool,
) -> _Plan:
    """Which file tensor fills each variable; what is missing, unexpected, ignored, mis-shaped.

    Names are resolved by ``js.nn``'s ``plan_load`` after the class's ``key_mapping``, with
    transformers' ``base_model_prefix`` rule: a model with a head (a ``transformer``/``model``
    child) reading a base model's file puts the prefix in front of its names; a base model
    reading a head model's file takes the names under the prefix and ignores the head.
    """
    rules = compile_key_mapping(cls.key_mapping)
    names = {key: rename_key(rules, key) for key in weights.shapes}
    prefix = cls.base_model_prefix
    head_model = bool(prefix) and any(path.startswith(prefix + ".") for path in variables)
    file_prefixed = bool(prefix) and any(n.startswith(prefix + ".") for n in names.values())
    plan_prefix = ""
    if head_model and not file_prefixed:  # a base model's file into a model with a head
        names = {k: f"{prefix}.{n}" for k, n in names.items()}
    elif prefix and not head_model and file_prefixed:  # a head model's file into its base
        plan_prefix = prefix + "."
    file_key = {name: key for key, name in names.items()}
    plan = plan_load(model, list(file_key), prefix=plan_prefix, strict=strict, source="the folder")
    source, mismatched, seen = {}, [], set()
    for name, path in plan.rename.items():
        key = file_key[name]
        want = tuple(variables[path].get_raw_value().shape)
        if weights.shapes[key] != want:
            mismatched.append(f"{key!r}: file {list(weights.shapes[key])}, model {list(want)}")
        if id(variables[path]) not in seen:  # a tied Parameter is read once
            seen.add(id(variables[path]))
            source[path] = key
    # transformers' _keys_to_ignore_on_load_unexpected: only keys the model has no place for
    ignore = [re.compile(p) for p in cls.ignore_on_load]
    unexpected = [file_key[n] for n in plan.unexpected]
    skipped = [k for k in unexpected if any(p.search(k) or p.search(names[k]) for p in ignore)]
    return _Plan(
        source,
        list(plan.missing),
        sorted(set(unexpected) - set(skipped)),
        sorted([*skipped, *(file_key[n] for n in plan.ignored)]),
        mismatched,
    )


# -- building ----------------------------------------------------------------------------------


def _check_dtype(dtype: Any) -> Any:
    if dtype is None or dtype == "auto":
        return dtype
    if isinstance(dtype, str) and dtype in _FLOAT_DTYPES:
        return jnp.dtype(_FLOAT_DTYPES[dtype])
    try:
        resolved = jnp.dtype(dtype)
    except TypeError:
        resolved = None
    if resolved is None or not jnp.issubdtype(resolved, jnp.floating):
        raise TypeError(
            f"from_pretrained: dtype must be a floating dtype (jnp.float32, jnp.bfloat16, "
            f"jnp.float16) or 'auto' or None, got {dtype!r}"
        )
    return resolved


def _target_dtype(abstract: Any, file_dtype: Any, dtype: Any) -> Any:
    if not jnp.issubdtype(abstract.dtype, jnp.floating):
        return abstract.dtype
    if dtype == "auto":
        return file_dtype if jnp.issubdtype(file_dtype, jnp.floating) else abstract.dtype
    return abstract.dtype if dtype is None else dtype


_ST_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": jnp.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}


class _ShapeRngs(js.Rngs):
    """``js.Rngs`` for a constructor traced for shapes only: ``next`` folds a Python counter
    into the stream's key instead of advancing the stream's traced counter, whose every update
    under the trace built an error message scanning the whole program (0.4 s for GPT-2 124M).
    The keys differ from ``js.Rngs``'s; the values they draw are never computed."""

    def next(self, name: str) -> jax.Array:
        """A key of stream ``name`` (shape and dtype as ``js.Rngs.next``'s)."""
        stream = self._stream(name)
        drawn = vars(self).get("_shape_draws", 0) + 1
        object.__setattr__(self, "_shape_draws", drawn)
        return jax.random.fold_in(stream.key.get_raw_value(), drawn)


def _build_abstract(cls: type[FamilyModel], config: Any) -> Any:
    """The model with a ``jax.ShapeDtypeStruct`` in every variable: its constructor traced,
    nothing drawn or allocated.

    ``nnx.eval_shape`` rebuilds each module with its attributes in sorted order, while js's
    traversal (``state_dict``, ``named_parameters``, the canonical path of a tied Parameter)
    follows assignment order: each module's attributes are put back in the constructor's order.
    """
    orders: dict[str, list[str]] = {}

    def build() -> Any:
        model = cast(Any, cls)(config, rngs=_ShapeRngs(params=0))
        orders.update({path: list(vars(m)) for path, m in model.named_modules()})
        return model

    model = nnx.eval_shape(build)
    for path, module in model.named_modules():
        attributes = vars(module)
        ordered = {k: attributes[k] for k in orders.get(path, ()) if k in attributes}
        ordered.update(attributes)
        attributes.clear()
        attributes.update(ordered)
    return model


def _initial_values(
    cls: type[FamilyModel], config: Any, wanted: Sequence[tuple]
) -> list[jax.Array]:
    """The constructor's own values of the variables at nnx paths ``wanted``: one compiled run
    whose other outputs XLA drops (no array of the rest of the model is materialised)."""
    wanted_set = set(wanted)

    def build() -> list:
        model = cast(Any, cls)(config, rngs=js.Rngs(params=0))
        flat = nnx.flatten(model, with_paths=True)[1]
        return [v.get_raw_value() for p, v in flat if p in wanted_set]

    return jax.jit(build)()


def load_pretrained(
    path: str | os.PathLike,
    cls: type[FamilyModel] | None,
    *,
    dtype: Any = None,
    strict: bool = True,
    mesh: Any = None,
    rules: Any = (),
) -> Any:
    """``cls`` (or the folder's own class when ``cls`` is None) built from ``path``; see
    :func:`from_pretrained`."""
    folder = _folder(path)
    config_dict = _read_config(folder)
    if cls is None:
        cls = _class_of(config_dict, folder)
    else:
        _check_class(cls, config_dict, folder)
    dtype = _check_dtype(dtype)
    if not isinstance(strict, bool):
        raise TypeError(f"from_pretrained: strict must be True or False, got {strict!r}")
    if mesh is not None:
        check_mesh("from_pretrained", mesh)
        rules = check_rules(rules)
    elif tuple(rules):
        raise ValueError(
            "from_pretrained: rules= place arrays on a mesh, but mesh is None. Fix: pass "
            "mesh=jax.make_mesh(...) too, or leave rules out"
        )
    weights = _Weights(folder)
    config = cls.config_class.from_dict(config_dict)
    model = _build_abstract(cls, config)
    variables = model._state_variables()
    plan = _plan_keys(cls, model, variables, weights, strict)
    _check_plan(cls, folder, plan, strict)
    specs = plan_placement(model, mesh, rules) if mesh is not None else None  # checks every rule
    _fill(cls, config, model, variables, weights, plan, dtype, mesh, specs)
    weights.close()
    if plan.ignored:
        _LOG.info(
            "%s: skipped %d tensors of %s: %s",
            cls.__name__,
            len(plan.ignored),
            folder,
            plan.ignored,
        )
    if plan.missing or plan.unexpected:
        _LOG.warning(
            "%s.from_pretrained(%s, strict=False): missing %s (kept at their initial values); "
            "unexpected %s (skipped)",
            cls.__name__,
            folder,
            plan.missing,
            plan.unexpected,
        )
    model.eval()
    _INFO[model] = LoadingInfo(plan.missing, plan.unexpected, plan.ignored)
    return model


def _check_plan(cls: type, folder: Path, plan: _Plan, strict: bool) -> None:
    problems = []
    if strict and plan.missing:
        problems.append(f"missing from the folder ({len(plan.missing)}): {plan.missing}")
    if strict and plan.unexpected:
        problems.append(
            f"unexpected (the model has no place for them) ({len(plan.unexpected)}): "
            f"{plan.unexpected}"
        )
    if plan.mismatched:
        problems.append(f"mis-shaped: {'; '.join(plan.mismatched)}")
    if problems:
        fix = "build the config the weights were saved with" + (
            ", or pass strict=False to skip missing/unexpected tensors" if strict else ""
        )
        raise ValueError(
            f"{cls.__name__}.from_pretrained({folder}): the weights do not fit the model; "
            "nothing was loaded.\n  " + "\n  ".join(problems) + f"\nFix: {fix}."
        )


def _fill(
    cls: type[FamilyModel],
    config: Any,
    model: Any,
    variables: Mapping[str, Any],
    weights: _Weights,
    plan: _Plan,
    dtype: Any,
    mesh: Any,
    specs: list | None,
) -> None:
    sharding_of: dict[int, Any] = {}
    if mesh is not None and specs is not None:
        sharding_of = {id(v): jax.sharding.NamedSharding(mesh, spec) for v, spec in specs}
    filled: set[int] = set()
    for path, key in plan.source.items():
        variable = variables[path]
        abstract = variable.get_raw_value()
        file_dtype = np.dtype(_ST_DTYPES.get(weights.dtypes[key], abstract.dtype))
        target = _target_dtype(abstract, file_dtype, dtype)
        convert = _converter(file_dtype, target, abstract)
        sharding = sharding_of.get(id(variable))
        if sharding is None:
            value = jax.device_put(convert(weights.read(key)))
        else:
            value = jax.make_array_from_callback(
                abstract.shape, sharding, _slice_reader(weights, key, convert)
            )
        variable.set_raw_value(value)
        filled.add(id(variable))
    flat = nnx.flatten(model, with_paths=True)[1]
    rest = [(p, v) for p, v in flat if isinstance(v, nnx.Variable) and id(v) not in filled]
    rest_unique, seen = [], set()
    for p, v in rest:
        if id(v) not in seen:
            seen.add(id(v))
            rest_unique.append((p, v))
    if not rest_unique:
        return
    values = _initial_values(cls, config, [p for p, _ in rest_unique])
    for (_, variable), value in zip(rest_unique, values, strict=True):
        if isinstance(variable, Parameter) and dtype not in (None, "auto"):
            if jnp.issubdtype(value.dtype, jnp.floating):
                value = value.astype(dtype)
        sharding = sharding_of.get(id(variable))
        variable.set_raw_value(value if sharding is None else place(value, sharding))


def _converter(file_dtype: Any, target: Any, abstract: Any) -> Callable[[np.ndarray], np.ndarray]:
    if jnp.issubdtype(abstract.dtype, jnp.floating) != jnp.issubdtype(file_dtype, jnp.floating):
        target = abstract.dtype  # an integer buffer stays exact: cast to the model's own type

    def convert(array: np.ndarray) -> np.ndarray:
        return array if array.dtype == target else array.astype(target)

    return convert


def _slice_reader(
    weights: _Weights, key: str, convert: Callable[[np.ndarray], np.ndarray]
) -> Callable[[Any], np.ndarray]:
    cache: dict[tuple, np.ndarray] = {}  # replicated slices are read once, not once a device

    def read(index: Any) -> np.ndarray:
        marker = tuple((s.start, s.stop, s.step) for s in index)
        if marker not in cache:
            cache[marker] = convert(weights.read(key, tuple(index)))
        return cache[marker]

    return read


def from_pretrained(
    path: str | os.PathLike,
    *,
    dtype: Any = None,
    strict: bool = True,
    mesh: Any = None,
    rules: Any = (),
) -> Any:
    """The model of a Hugging Face or timm folder, in eval mode.

    The class comes from ``config.json`` (transformers' ``model_type`` and ``architectures``,
    or timm's ``architecture``); the weights from ``model.safetensors`` or a sharded
    ``model.safetensors.index.json``, read one tensor at a time. Every missing, unexpected and
    mis-shaped tensor is reported in one ValueError before anything is read.

    Args:
        path: a local folder (nothing is downloaded).
        dtype: ``jnp.bfloat16``/``jnp.float16``/``jnp.float32``: floating parameters and saved
            buffers are cast to it on load (integer buffers keep theirs); ``"auto"``: each
            floating tensor keeps the file's dtype; ``None``: the model's own (float32).
        strict: with ``False``, tensors the model lacks are skipped and variables the folder
            lacks keep their initial values; both are logged and kept in
            ``js.models.loading_info(model)``.
        mesh: a ``jax.sharding.Mesh`` (``AxisType.Auto`` axes): each array is read straight
            onto its shards, each process reading only the slices its devices hold.
        rules: ``js.shard``'s ``(pattern, PartitionSpec)`` rules (others are replicated).

    Returns:
        The model, in eval mode.

    Example:
        >>> model = js.models.from_pretrained("gpt2-folder", dtype=jnp.bfloat16)  # doctest: +SKIP
    """
    return load_pretrained(path, None, dtype=dtype, strict=strict, mesh=mesh, rules=rules)


# -- saving ------------------------------------------------------------------------------------


def save_pretrained(model: FamilyModel, path: str | os.PathLike) -> None:
    """Write ``config.json`` and ``model.safetensors`` for ``model`` into the folder ``path``
    (created if needed): the source library's names, a tied tensor once (at its first path),
    no non-persistent buffers, ``{"format": "pt"}`` metadata as transformers writes."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(
            f"save_pretrained: {folder} is a file. Fix: pass a folder path (it is created)"
        )
    config = model._config_json()
    rules = compile_key_mapping(model.save_key_mapping)  # once, not once per tensor
    tensors: dict[str, np.ndarray] = {}
    seen: set[int] = set()
    for name, variable in model._state_variables().items():
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        array = variable.get_raw_value()
        if not getattr(array, "is_fully_addressable", True):
            raise NotImplementedError(
                "save_pretrained: the model spans several processes. Fix: gather it first "
                "(js.shard onto a one-process mesh) or save a checkpoint with js.training"
            )
        tensors[rename_key(rules, name)] = np.ascontiguousarray(jax.device_get(array))
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{WEIGHTS_NAME}.partial"
    safetensors.numpy.save_file(tensors, str(partial), metadata={"format": "pt"})
    os.replace(partial, folder / WEIGHTS_NAME)
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
