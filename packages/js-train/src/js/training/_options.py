"""The Trainer's option checks: everything that can be refused before a step runs."""

from __future__ import annotations

from js._checks import check_int

from ._callbacks import Callback, check_monitor


def check_options(max_epochs, options: dict) -> dict:
    """The step options as ints (or None), refusing conflicting combinations."""
    checked = {
        name: None if value is None else check_int("Trainer", name, value, 1)
        for name, value in options.items()
    }
    if max_epochs is None and checked["max_steps"] is None:
        raise ValueError(
            "Trainer needs max_epochs or max_steps (or both), got neither. Fix: "
            "Trainer(max_epochs=10) or Trainer(max_steps=5000)."
        )
    most = checked["max_steps"]
    for name in ("val_every_n_steps", "log_every_n_steps"):
        every = checked[name]
        if most is not None and every is not None and every > most:
            raise ValueError(
                f"Trainer {name}={every} is more than max_steps={most}: it would never "
                f"happen. Fix: {name} <= max_steps, or None."
            )
    return checked


def check_callbacks(callbacks: tuple) -> None:
    for callback in callbacks:
        if not isinstance(callback, Callback):
            raise TypeError(
                f"Trainer callbacks must be Callback instances, got {type(callback).__name__}"
            )
    paths = [str(c.path) for c in callbacks if hasattr(c, "path")]
    if len(paths) != len(set(paths)):
        raise ValueError(
            f"Trainer got two checkpoint callbacks writing to the same path ({paths}): they "
            "would overwrite each other. Fix: give each its own directory."
        )


def check_monitors(callbacks, has_val: bool) -> None:
    """Fail before training when a callback monitors a metric no row can produce.

    The Trainer's metrics are ``epoch``, ``step``, ``time/epoch_s``, ``time/samples_per_s``,
    ``lr`` and ``<split>/loss``, ``/count`` and ``/accuracy`` (the last only when steps return
    ``correct``, known after the first step) for ``train`` and, with validation data, ``val``.
    """
    splits = ("train", "val") if has_val else ("train",)
    names = ["epoch", "step", "time/epoch_s", "time/samples_per_s", "lr"] + [
        f"{split}/{metric}" for split in splits for metric in ("loss", "count", "accuracy")
    ]
    for callback in callbacks:
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str):
            check_monitor(type(callback).__name__, monitor, names)


def check_data(data, name: str, several_epochs: bool) -> None:
    if not hasattr(data, "__iter__"):
        raise TypeError(f"fit: {name} must be an iterable of batches, got {type(data).__name__}")
    if several_epochs and iter(data) is data:
        raise TypeError(
            f"fit: {name} is a one-shot iterator (a generator?), which would be empty after the "
            "first epoch. Fix: pass a re-iterable, such as a list or an ArrayLoader, or train "
            "an endless generator with Trainer(max_steps=...) and max_epochs=None."
        )
