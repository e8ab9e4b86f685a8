"""The former home of the checkpoint format's reading half, kept so that old imports work:
everything now lives in :mod:`js.nn.checkpoint` (``format``, ``digest``, ``read``)."""

from .checkpoint.digest import EMPTY as EMPTY
from .checkpoint.digest import digest_terms as digest_terms
from .checkpoint.digest import hex_digest as hex_digest
from .checkpoint.digest import host_digest as host_digest
from .checkpoint.digest import packed_digests as packed_digests
from .checkpoint.format import FORMAT as FORMAT
from .checkpoint.format import KINDS as KINDS
from .checkpoint.format import OLD_FORMATS as OLD_FORMATS
from .checkpoint.format import CheckpointError as CheckpointError
from .checkpoint.format import item_name as item_name
from .checkpoint.format import locate as locate
from .checkpoint.format import meta_problems as meta_problems
from .checkpoint.format import read_json as read_json
from .checkpoint.format import read_meta as read_meta
from .checkpoint.format import read_metrics as read_metrics
from .checkpoint.format import score as score
from .checkpoint.format import select_step as select_step
from .checkpoint.format import steps_in as steps_in
from .checkpoint.read import checked_item as checked_item
from .checkpoint.read import host_tree as host_tree
from .checkpoint.read import read_checkpoint as read_checkpoint
