"""Runs that send the Trainer's rows to experiment trackers: MLflowRun and WandbRun.

Each is a :class:`Run` (``log(metrics, step)``, ``close()``) like CSVRun: the Trainer calls
``log`` once per reported row with ``step`` the global step, and ``close`` when ``fit`` ends.
The tracker is imported only when a run is made (``pip install 'js-train[mlflow]'`` or
``'js-train[wandb]'``). Nothing here downloads anything or contacts a server unless given a
server's URI (MLflow) or ``mode='online'`` (W&B). In a multi-process job, make the run in
process 0 only (``run=MLflowRun(...) if jax.process_index() == 0 else None``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"


def _tracking_uri(where: str | os.PathLike) -> tuple[str, bool]:
    """``(uri, is_a_local_file_store)``: a path (or ``file:`` URI) is a local file store."""
    if isinstance(where, os.PathLike) or "://" not in str(where):
        text = str(where)
        if text.startswith("file:"):
            return text, True
        return Path(text).expanduser().absolute().as_uri(), True
    text = str(where)
    return text, text.startswith("file:")


class MLflowRun:
    """Log the Trainer's rows to an MLflow run (a local directory by default: no server).

    Every float of a row but ``step`` becomes a metric at ``step`` (the global step), keyed by
    its name (``train/loss``, ``val/accuracy``, ``lr``, ``epoch``); a row logged again at the
    same step (an epoch's end adding its columns) sends only the values it adds or changes.
    ``params`` are logged once, as MLflow params (strings). ``close()`` marks the run
    FINISHED; a later fit may keep logging to it (MLflow keeps the whole history).

    MLflow 3.17+ refuses its file store (``mlruns`` directories) unless
    ``MLFLOW_ALLOW_FILE_STORE=true``; this run sets that variable around its own calls when
    ``tracking_uri`` is a path or ``file:`` URI, and never otherwise. To read the store in
    another process (``MlflowClient(uri)``, ``mlflow ui --backend-store-uri <uri>``), set it
    there too. Needs mlflow (``pip install 'js-train[mlflow]'``), imported only here.

    Args:
        tracking_uri: a directory for a local file store (created if missing), or any MLflow
            tracking URI (``sqlite:///mlflow.db``, ``http://host:5000``).
        experiment: the experiment's name (created if missing).
        run_name: the run's name; None lets MLflow pick one.
        params: hyperparameters to record once, e.g. ``{'lr': 3e-4, 'batch_size': 64}``.
        tags: string tags of the run.

    Example:
        >>> run = MLflowRun("runs/mlflow", params={"lr": 1e-3})  # doctest: +SKIP
        >>> Trainer(max_epochs=10, run=run).fit(task, loader)  # doctest: +SKIP
        >>> client = MlflowClient(run.tracking_uri)  # doctest: +SKIP
        >>> client.get_metric_history(run.run_id, "train/loss")  # doctest: +SKIP
    """

    def __init__(
        self,
        tracking_uri: str | os.PathLike = "runs/mlflow",
        *,
        experiment: str = "js",
        run_name: str | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(tracking_uri, (str, os.PathLike)):
            raise TypeError(
                f"MLflowRun tracking_uri must be a directory or an MLflow URI, got "
                f"{type(tracking_uri).__name__}. Fix: e.g. MLflowRun('runs/mlflow')."
            )
        for name, value in (("params", params), ("tags", tags)):
            if value is not None and not isinstance(value, Mapping):
                raise TypeError(
                    f"MLflowRun {name} must be a dict, got {type(value).__name__}. Fix: e.g. "
                    f"{name}={{'lr': 0.001}}."
                )
        try:
            from mlflow.entities import Metric, Param
            from mlflow.tracking import MlflowClient
        except ImportError as error:
            raise ImportError("MLflowRun needs mlflow: pip install 'js-train[mlflow]'") from error
        self.tracking_uri, self._file_store = _tracking_uri(tracking_uri)
        with self._allowed():
            self.client = MlflowClient(self.tracking_uri)
            self._metric_type = Metric
            found = self.client.get_experiment_by_name(experiment)
            self.experiment_id = (
                found.experiment_id if found else self.client.create_experiment(experiment)
            )
            run = self.client.create_run(
                self.experiment_id,
                run_name=run_name,
                tags={str(k): str(v) for k, v in (tags or {}).items()},
            )
            self.run_id: str = run.info.run_id
            if params:
                self.client.log_batch(
                    self.run_id, params=[Param(str(k), str(v)) for k, v in params.items()]
                )
        self._last: dict[str, tuple[int, float]] = {}
        self._closed = False

    @contextmanager
    def _allowed(self) -> Iterator[None]:
        """``MLFLOW_ALLOW_FILE_STORE=true`` for a local file store, only during the block."""
        if not self._file_store:
            yield
            return
        before = os.environ.get(_ALLOW_FILE_STORE)
        os.environ[_ALLOW_FILE_STORE] = "true"
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(_ALLOW_FILE_STORE, None)
            else:
                os.environ[_ALLOW_FILE_STORE] = before

    def log(self, metrics: dict, step: int) -> None:
        """Log every metric of ``metrics`` (but ``step``) at ``step``, in one batch."""
        Metric = self._metric_type  # noqa: N806 - mlflow's class, imported in __init__
        stamp, step = int(time.time() * 1000), int(step)
        batch = []
        for key, value in metrics.items():
            if key == "step":
                continue
            value = float(value)
            last = self._last.get(key)
            if last is not None and last[0] == step and _same(last[1], value):
                continue  # the row logged again at its step: only what it adds
            self._last[key] = (step, value)
            batch.append(Metric(key, value, stamp, step))
        if batch:
            with self._allowed():
                self.client.log_batch(self.run_id, metrics=batch)
                if self._closed:  # a later fit: the run is running again
                    self.client.update_run(self.run_id, status="RUNNING")
                    self._closed = False

    def close(self) -> None:
        """Mark the run FINISHED."""
        with self._allowed():
            self.client.set_terminated(self.run_id)
        self._closed = True


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


class WandbRun:
    """Log the Trainer's rows to a Weights & Biases run, offline by default (no account).

    Every float of a row but ``step`` is logged at ``step`` (the global step), keyed by its
    name; rows logged at the same step (an epoch's end adding its columns) make one W&B
    history row. Offline, W&B writes ``<directory>/wandb/offline-run-<time>-<id>/run-<id>.wandb``
    (``path``) and never asks for a login or opens a connection; ``wandb sync <run dir>``
    uploads it later. With ``quiet`` (the default) W&B prints nothing and does not capture the
    console. ``close()`` (called when ``fit`` ends) finishes the run: give each fit its own
    WandbRun. Needs wandb (``pip install 'js-train[wandb]'``), imported only here.

    Args:
        project: the W&B project.
        directory: where the ``wandb/`` folder is written (created if missing).
        mode: ``'offline'``, ``'online'`` (needs ``wandb login``) or ``'disabled'``.
        name: the run's display name; None lets W&B pick one.
        config: hyperparameters to record, e.g. ``{'lr': 3e-4}``.
        tags: tags of the run.
        quiet: silence W&B's own console output and leave stdout and stderr uncaptured.

    Example:
        >>> run = WandbRun("digits", config={"lr": 1e-3})  # doctest: +SKIP
        >>> Trainer(max_epochs=10, run=run).fit(task, loader)  # doctest: +SKIP
    """

    def __init__(
        self,
        project: str | None = None,
        *,
        directory: str | os.PathLike = "runs",
        mode: str = "offline",
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        tags: list[str] | tuple[str, ...] | None = None,
        quiet: bool = True,
    ) -> None:
        if mode not in ("offline", "online", "disabled"):
            raise ValueError(
                f"WandbRun mode must be 'offline', 'online' or 'disabled', got {mode!r}. Fix: "
                "mode='offline' writes the run locally (wandb sync uploads it later)."
            )
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(
                f"WandbRun config must be a dict, got {type(config).__name__}. Fix: e.g. "
                "config={'lr': 0.001}."
            )
        try:
            import wandb
        except ImportError as error:
            raise ImportError("WandbRun needs wandb: pip install 'js-train[wandb]'") from error
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        settings: dict[str, Any] = {"silent": True, "console": "off"} if quiet else {}
        self.run = wandb.init(
            project=project,
            dir=str(self.directory),
            mode=mode,  # type: ignore[arg-type]  (checked above)
            name=name,
            config=dict(config) if config is not None else None,
            tags=list(tags) if tags is not None else None,
            reinit="create_new",  # its own run, whatever else this process logs to W&B
            settings=wandb.Settings(**settings),
        )
        sync_file = getattr(self.run.settings, "sync_file", None)
        self.path = Path(sync_file) if sync_file and mode == "offline" else None
        self._closed = False

    def log(self, metrics: dict, step: int) -> None:
        """Log every metric of ``metrics`` (but ``step``) at ``step``."""
        if self._closed:
            raise RuntimeError(
                "WandbRun: this run was finished when its fit ended (the Trainer closes its "
                "run). Fix: give each fit its own WandbRun."
            )
        values = {key: float(value) for key, value in metrics.items() if key != "step"}
        self.run.log(values, step=int(step))

    def close(self) -> None:
        """Finish the run (everything logged is written to its files)."""
        if not self._closed:
            self.run.finish()
            self._closed = True
