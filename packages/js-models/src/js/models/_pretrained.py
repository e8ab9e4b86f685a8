"""Reading and writing model folders: ``config.json``, safetensors weights and
``generation_config.json`` (``generate``'s defaults).

Loading builds the model abstractly (``nnx.eval_shape`` of its constructor: shapes only, no
random initialisation) and fills each variable from the file, one tensor at a time, straight
to its devices (with a mesh: each device's slice only, read with safetensors' slicing). What
the file does not hold (non-persistent buffers such as rotary frequencies, RNG state, and with
``strict=False`` the missing keys) gets its real initial value from one compiled run of the
constructor that computes just those arrays. Everything is checked before anything is read.

The parts live beside this module: ``_folders`` (the folder, its config and its class),
``_weight_files`` (the safetensors reader and dtypes), ``_key_plan`` (file names against the
model's) and ``_abstract`` (the model built without its weights).
"""

from __future__ import annotations

import json
import logging
import os
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy
from flax import nnx

from js import Parameter
from js._checks import check_mesh
from js._sharding import check_rules, place, plan_placement
from js.nn._keys import compile_key_mapping, rename_key

from ._abstract import _build_abstract, _initial_values
from ._folders import CONFIG_NAME, FamilyModel, _check_class, _class_of, _folder, _read_config
from ._generation import DEFAULTS as GENERATE_DEFAULTS
from ._generation import generation_config, set_generation_config
from ._key_plan import _check_plan, _Plan, _plan_keys
from ._weight_files import (
    _ST_DTYPES,
    WEIGHTS_NAME,
    _check_dtype,
    _converter,
    _slice_reader,
    _target_dtype,
    _Weights,
)

_LOG = logging.getLogger("js.models")
GENERATION_CONFIG_NAME = "generation_config.json"  # generate's defaults (transformers')


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


# -- loading -----------------------------------------------------------------------------------


def load_pretrained(
    cls: type[FamilyModel] | None,
    path: str | os.PathLike,
    dtype: Any,
    strict: bool,
    mesh: Any,
    rules: Any,
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
    weights = cls.weights_view(_Weights(folder))  # per-expert tensors stacked (MoE), ...
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
    if (folder / GENERATION_CONFIG_NAME).is_file():  # generate's defaults, as transformers reads
        set_generation_config(model, json.loads((folder / GENERATION_CONFIG_NAME).read_text()))
    return model


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
    return load_pretrained(None, path, dtype, strict, mesh, rules)


# -- saving ------------------------------------------------------------------------------------


def save_pretrained(model: FamilyModel, path: str | os.PathLike) -> None:
    """Write ``config.json``, ``model.safetensors`` (and ``generation_config.json`` when the
    model's ``generation_config`` sets more of ``generate``'s options than its config) for
    ``model`` into the folder ``path`` (created if needed): the source library's names, a tied
    tensor once (at its first path),
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
        host = jax.device_get(array)  # ascontiguousarray alone would make a scalar [1]
        tensors[rename_key(rules, name)] = np.ascontiguousarray(host).reshape(np.shape(host))
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{WEIGHTS_NAME}.partial"
    safetensors.numpy.save_file(tensors, str(partial), metadata={"format": "pt"})
    os.replace(partial, folder / WEIGHTS_NAME)
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    generation = generation_config(model)
    # written when it sets an option of generate's that config.json does not (as is)
    said = {k: v for k, v in generation.items() if k in GENERATE_DEFAULTS}
    if any(k not in config or config[k] != v for k, v in said.items()):
        text = json.dumps(generation, indent=2, sort_keys=True) + "\n"
        (folder / GENERATION_CONFIG_NAME).write_text(text)
