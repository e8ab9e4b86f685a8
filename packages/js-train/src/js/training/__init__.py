"""js.training (the js-train distribution): compiled steps, Task, Trainer and checkpoints."""

from js._interface import require as _require

from ._version import INTERFACE as __interface__
from ._version import REQUIRES as _REQUIRES
from ._version import __version__

_require("js-train", __version__, _REQUIRES)

# The checkpoint format and its readers are js-nn's (js.nn.checkpoint); re-exported here,
# where a training script looks for them next to ModelCheckpoint. save_checkpoint and
# load_checkpoint are js-nn's too, and here also take a grain pipeline as the 'loader' entry.
from js.nn.checkpoint import CheckpointError as CheckpointError  # noqa: E402
from js.nn.checkpoint import checkpoint_info as checkpoint_info  # noqa: E402
from js.nn.checkpoint import export_weights as export_weights  # noqa: E402

from . import data as data  # noqa: E402
from . import steps as steps  # noqa: E402
from ._callbacks import Callback as Callback  # noqa: E402
from ._callbacks import EarlyStopping as EarlyStopping  # noqa: E402
from ._callbacks import SaveRequest as SaveRequest  # noqa: E402
from ._checkpoint import ModelCheckpoint as ModelCheckpoint  # noqa: E402
from ._checkpoint import load_checkpoint as load_checkpoint  # noqa: E402
from ._checkpoint import save_checkpoint as save_checkpoint  # noqa: E402
from ._distributed import detect_cluster as detect_cluster  # noqa: E402
from ._distributed import init_distributed as init_distributed  # noqa: E402
from ._perf import measure_peak_flops as measure_peak_flops  # noqa: E402
from ._precision import autocast as autocast  # noqa: E402
from ._progress import Display as Display  # noqa: E402
from ._quiet import show_library_logs as show_library_logs  # noqa: E402
from ._runs import CSVRun as CSVRun  # noqa: E402
from ._runs import TensorBoardRun as TensorBoardRun  # noqa: E402
from ._runs import plot_run as plot_run  # noqa: E402
from ._signals import Preempted as Preempted  # noqa: E402
from ._task import Task as Task  # noqa: E402
from ._trackers import MLflowRun as MLflowRun  # noqa: E402
from ._trackers import WandbRun as WandbRun  # noqa: E402
from ._trainer import Trainer as Trainer  # noqa: E402
from ._weight_averaging import EMAWeightAveraging as EMAWeightAveraging  # noqa: E402
from ._weight_averaging import WeightAveraging as WeightAveraging  # noqa: E402
from .data._arrays import ArrayLoader as ArrayLoader  # noqa: E402

__all__ = [
    "ArrayLoader",
    "CSVRun",
    "Callback",
    "CheckpointError",
    "EMAWeightAveraging",
    "EarlyStopping",
    "MLflowRun",
    "ModelCheckpoint",
    "Preempted",
    "Display",
    "SaveRequest",
    "Task",
    "TensorBoardRun",
    "Trainer",
    "WandbRun",
    "WeightAveraging",
    "__interface__",
    "__version__",
    "autocast",
    "export_weights",
    "detect_cluster",
    "init_distributed",
    "checkpoint_info",
    "data",
    "load_checkpoint",
    "measure_peak_flops",
    "plot_run",
    "save_checkpoint",
    "show_library_logs",
    "steps",
]
