"""MLflowRun and WandbRun: a real fit logged to each, read back from the local files and
compared with trainer.history (MLflow through its client; W&B by parsing its .wandb log)."""

from __future__ import annotations

import json
import os
import struct
import sys
import time
import zlib

import pytest

from js.training import ArrayLoader, MLflowRun, Trainer, WandbRun

try:  # mlflow's import takes about 4 s: paid here, at collection, not by the first MLflow test
    import mlflow.entities  # noqa: F401
    import mlflow.tracking  # noqa: F401
except ImportError:  # the MLflow tests skip themselves (importorskip)
    pass


def fit(make_task, data, run):
    x, y = data
    trainer = Trainer(
        max_epochs=2, run=run, log_every_n_steps=2, progress=False, verbose=False
    )  # 6 steps an epoch: logs at steps 2, 4, 6 (the epoch's end, with validation) ...
    trainer.fit(make_task(), ArrayLoader(x, y, batch_size=16), ArrayLoader(x, y, batch_size=48))
    return trainer.history


def history_by_key(history) -> dict[str, dict[int, float]]:
    """{key: {step: value}}: the value a key had in the last row of each step."""
    columns: dict[str, dict[int, float]] = {}
    for row in history:
        for key, value in row.items():
            if key != "step":
                columns.setdefault(key, {})[int(row["step"])] = value
    return columns


# -- MLflow ------------------------------------------------------------------------------------


def test_mlflow_run_logs_every_row_to_a_local_file_store(make_task, data, tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    run = MLflowRun(tmp_path / "mlruns", experiment="blobs", run_name="first", params={"lr": 0.05})
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ  # set only around its own calls
    history = fit(make_task, data, run)
    assert run.tracking_uri == (tmp_path / "mlruns").as_uri()

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a reader needs it too
    client = MlflowClient(run.tracking_uri)
    record = client.get_run(run.run_id)
    assert record.info.status == "FINISHED"
    assert record.info.run_name == "first"
    assert record.data.params == {"lr": "0.05"}
    assert client.get_experiment(record.info.experiment_id).name == "blobs"
    expected = history_by_key(history)
    assert {"train/loss", "val/loss", "val/accuracy", "epoch", "lr"} - set(expected) <= {"lr"}
    assert set(record.data.metrics) == set(expected)
    for key, by_step in expected.items():
        logged = client.get_metric_history(run.run_id, key)
        # once per step: a row logged again at its step (the epoch's end) adds only new values
        assert [m.step for m in logged] == sorted(by_step), key
        assert {m.step: m.value for m in logged} == by_step, key
    run.log({"step": 99.0, "train/loss": 0.25}, step=99)  # a later fit: running again
    assert client.get_run(run.run_id).info.status == "RUNNING"
    run.close()
    assert client.get_run(run.run_id).info.status == "FINISHED"
    assert client.get_metric_history(run.run_id, "train/loss")[-1].value == 0.25


def test_mlflow_run_arguments_are_checked(tmp_path):
    pytest.importorskip("mlflow")
    with pytest.raises(TypeError, match="tracking_uri must be a directory or an MLflow URI"):
        MLflowRun(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"params must be a dict, got list. Fix: e.g."):
        MLflowRun(tmp_path, params=["lr"])  # type: ignore[arg-type]


def test_mlflow_run_without_mlflow_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    monkeypatch.setitem(sys.modules, "mlflow.entities", None)
    with pytest.raises(
        ImportError, match=r"MLflowRun needs mlflow: pip install 'js-train\[mlflow\]'"
    ):
        MLflowRun(tmp_path)


# -- W&B ---------------------------------------------------------------------------------------


def wandb_records(path):
    """The records of a .wandb file: W&B writes protobuf ``Record``s in LevelDB's log format
    (a 7-byte header ``:W&B``, magic 0xBEE1, version 0; 32 KiB blocks of chunks, each with a
    CRC-32 of its type byte and data, a length and a type: full, first, middle, last); wandb
    ships the message types but no reader."""
    from wandb.proto import wandb_internal_pb2

    raw = path.read_bytes()
    assert struct.unpack("<4sHB", raw[:7]) == (b":W&B", 0xBEE1, 0)
    block, at, pending, records = 32768, 7, b"", []
    while at < len(raw):
        if block - at % block < 7:  # too little room for a chunk header: zero padding
            at += block - at % block
            continue
        checksum, length, kind = struct.unpack("<IHB", raw[at : at + 7])
        chunk = raw[at + 7 : at + 7 + length]
        assert checksum == zlib.crc32(chunk, zlib.crc32(bytes([kind]))), "damaged chunk"
        at += 7 + length
        pending += chunk
        if kind in (1, 4):  # full, last
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def finished_records(path, timeout_s=60.0):
    """The records of a finished run's .wandb file. ``finish()`` returns when W&B's service
    has handled the exit record; the service's writer flushes and closes the file just after,
    in the background (``wandb.teardown()`` would wait for it, for every run of the process)."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = wandb_records(path)
        if records and records[-1].WhichOneof("record_type") == "exit":
            return records
        assert time.monotonic() < deadline, f"{path} holds no exit record after {timeout_s} s"
        time.sleep(0.05)


def wandb_history(path) -> dict[str, dict[int, float]]:
    """{key: {step: value}} from the history records of a .wandb file (W&B's own _keys out)."""
    columns: dict[str, dict[int, float]] = {}
    for record in finished_records(path):
        if record.WhichOneof("record_type") == "history":
            step = record.history.step.num
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    columns.setdefault(key, {})[step] = json.loads(item.value_json)
    return columns


def test_wandb_run_logs_every_value_offline_and_quietly(make_task, data, tmp_path, capfd):
    pytest.importorskip("wandb")
    run = WandbRun("blobs", directory=tmp_path, name="first", config={"lr": 0.05})
    history = fit(make_task, data, run)
    out, err = capfd.readouterr()
    assert "wandb" not in (out + err).lower()  # nothing printed, no login asked
    assert run.path is not None and run.path.is_file()
    assert run.path.parent.parent == tmp_path / "wandb"
    assert run.path.parent.name.startswith("offline-run-")
    records = finished_records(run.path)
    (header,) = [record.run for record in records if record.WhichOneof("record_type") == "run"]
    assert header.project == "blobs" and header.display_name == "first"
    config = {item.key: json.loads(item.value_json) for item in header.config.update}
    assert config["lr"] == 0.05
    expected = history_by_key(history)
    assert wandb_history(run.path) == expected  # every value, at its step, exactly
    with pytest.raises(RuntimeError, match="give each fit its own WandbRun"):
        run.log({"train/loss": 1.0}, step=100)


def test_wandb_run_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="mode must be 'offline', 'online' or 'disabled'"):
        WandbRun(directory=tmp_path, mode="dryrun")
    with pytest.raises(TypeError, match="config must be a dict, got list"):
        WandbRun(directory=tmp_path, config=["lr"])  # type: ignore[arg-type]


def test_wandb_run_without_wandb_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"WandbRun needs wandb: pip install 'js-train\[wandb\]'"):
        WandbRun(directory=tmp_path)
