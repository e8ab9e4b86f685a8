"""js checkpoints (format ``js.training/2``), all of it in one place: saving, loading onto the
current devices and shardings, reading as NumPy, checking.

The modules, in the order a reader meets them:

* :mod:`.format`: a step's layout and ``meta`` record, their checks, the choice of a step
  (``which``), the kinds of saved objects, :class:`CheckpointError`, the orbax manager;
* :mod:`.digest`: the content digest of every array, on the host and on devices;
* :mod:`.lock`: one writer per directory;
* :mod:`.write`: :func:`save_checkpoint` and the items it writes;
* :mod:`.read`: reading and checking items (:func:`read_checkpoint`);
* :mod:`.load`: :func:`load_checkpoint` and :func:`checkpoint_info`;
* :mod:`.export`: a step as a safetensors weight file (:func:`export_weights`).

Here, in js-nn, because an inference install (js-core + js-nn) loads what js-train's
``ModelCheckpoint`` saved: js-train uses this package (its ``ModelCheckpoint`` saves through
:func:`.write.save_args` and :func:`.format.manager`) and re-exports its public names, and
nothing here imports js-train or js-optim (an optimizer is recognised by its
``state_dict``/``load_state_dict`` protocol). orbax is imported only when a step is written or
read: ``import js.nn`` never imports it.
"""

from .export import export_weights as export_weights
from .format import FORMAT as FORMAT
from .format import CheckpointError as CheckpointError
from .load import checkpoint_info as checkpoint_info
from .load import load_checkpoint as load_checkpoint
from .read import read_checkpoint as read_checkpoint
from .write import save_checkpoint as save_checkpoint

__all__ = [
    "FORMAT",
    "CheckpointError",
    "checkpoint_info",
    "export_weights",
    "load_checkpoint",
    "read_checkpoint",
    "save_checkpoint",
]
