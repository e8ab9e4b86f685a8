"""The ``'loader'`` entry of a checkpoint: the position of the batches a fit's steps consumed.

:class:`ArrayPosition` (an ArrayLoader's ``state_dict``) and :class:`GrainPosition` (grain's
iterator state, as JSON) are what ``Trainer.loader_position`` returns. A grain pipeline has no
position of its own (each iterator has one): :func:`with_positions` puts the Trainer's
position of it in its place, so ``js.training.save_checkpoint``/``load_checkpoint`` take the
pipeline itself as the ``'loader'`` entry, next to the ``'trainer'`` that iterates it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ._grain import grain_kind
from ._train_data import TrainData


class GrainPosition:
    """The ``'loader'`` checkpoint entry of a grain pipeline: ``get_state()`` is grain's state
    after the last batch a step consumed (``{'grain': kind, 'state': ...}``); ``set_state``
    keeps a saved one for the next ``fit(..., resume=True)`` on the same pipeline, after
    ``check_state`` (asked by ``load_checkpoint`` before anything is restored) found it fits.
    """

    def __init__(self, data: TrainData, remember: Callable[[TrainData], None]) -> None:
        self._data, self._remember = data, remember

    def get_state(self) -> dict:
        return {"grain": self._data.grain, "state": self._data.consumed}

    def check_state(self, state: Any) -> str | None:
        kind = self._data.grain
        saved = state.get("grain") if isinstance(state, dict) else None
        if saved != kind or "state" not in state:
            what = f"a grain {saved} position" if saved else f"not a grain position ({state!r})"
            return (
                f"the checkpoint holds {what}, but the loader given is a grain {kind}. Fix: "
                "name the same pipeline as the saved run: {..., 'trainer': trainer, 'loader': "
                "train_data}"
            )
        inner = state["state"]
        if kind != "DataLoader" and isinstance(inner, dict):
            try:
                fresh = iter(self._data.data).get_state()
            except Exception:  # noqa: BLE001 - the iterator itself refuses at fit time
                return None
            if isinstance(fresh, dict) and set(fresh) != set(inner):
                return (
                    f"the saved grain iterator state has the fields {sorted(inner)}, this "
                    f"pipeline's iterator {sorted(fresh)}: another pipeline. Fix: build the "
                    "same pipeline (transformations, prefetch, workers) as the saved run"
                )
        elif kind == "DataLoader":
            try:
                json.loads(inner)
            except (TypeError, ValueError):
                return f"the saved DataLoader state is not grain's JSON text ({inner!r:.60})"
        return None

    def set_state(self, state: Any) -> None:
        problem = self.check_state(state)
        if problem is not None:
            raise ValueError(f"loader: {problem}")
        self._data.consumed = self._data.resume_state = state["state"]
        self._remember(self._data)


class ArrayPosition:
    """The ``'loader'`` checkpoint entry of a stateful loader (ArrayLoader): its
    ``state_dict()`` after the last batch a step consumed, not after those a prefetching
    thread ran ahead to; ``load_state_dict`` restores the loader itself (so a checkpoint
    saved from this entry loads into the loader too, and the reverse)."""

    def __init__(self, data: TrainData) -> None:
        self._data = data

    def state_dict(self) -> dict:
        consumed = self._data.consumed
        return dict(consumed) if consumed is not None else self._data.data.state_dict()

    def load_state_dict(self, state) -> None:
        self._data.data.load_state_dict(state)
        self._data.consumed = self._data.data.state_dict()


def with_positions(objects: Any, caller: str) -> tuple[Any, dict[str, Any]]:
    """``objects`` with each grain pipeline (``MapDataset``, ``IterDataset``, ``DataLoader``)
    replaced by ``trainer.loader_position(pipeline)``, where ``trainer`` is the one Trainer
    among ``objects``; and ``{name: pipeline}`` of those replaced. Anything else is left to
    js-nn's checks (``objects`` unchanged when it holds no pipeline)."""
    if not isinstance(objects, Mapping):
        return objects, {}
    pipelines = {name: obj for name, obj in objects.items() if grain_kind(obj) is not None}
    if not pipelines:
        return objects, {}
    trainers = [
        name for name, obj in objects.items() if callable(getattr(obj, "loader_position", None))
    ]
    if len(trainers) != 1:
        name, pipeline = next(iter(pipelines.items()))
        found = "no Trainer" if not trainers else f"{len(trainers)} Trainers ({trainers})"
        raise TypeError(
            f"{caller}: {name!r} is a grain {grain_kind(pipeline)}, whose position is kept by "
            f"the Trainer that trains on it, and the objects hold {found}. Fix: name that "
            f"Trainer with it, {{..., 'trainer': trainer, {name!r}: train_data}}, or pass "
            f"{name!r}: trainer.loader_position(train_data)"
        )
    trainer = objects[trainers[0]]
    return {
        name: trainer.loader_position(obj) if name in pipelines else obj
        for name, obj in objects.items()
    }, pipelines


def check_consumed(objects: Mapping[str, Any], pipelines: Mapping[str, Any]) -> None:
    """Refuse to save a grain pipeline's position when its Trainer consumed none of its
    batches (the saved state would be None, which no resume can use)."""
    for name, pipeline in pipelines.items():
        if objects[name].get_state()["state"] is None:
            raise ValueError(
                f"save_checkpoint: {name!r}, a grain {grain_kind(pipeline)}, has no position to "
                "save: the Trainer consumed none of its batches (it is not the train_data of "
                "the Trainer's current or last fit, or no step ran). Fix: save after "
                f"trainer.fit(task, train_data) ran a step on this very object, or leave "
                f"{name!r} out"
            )
