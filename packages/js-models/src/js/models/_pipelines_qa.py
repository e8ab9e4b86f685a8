"""The ``question-answering`` task of ``js.models.pipeline`` (transformers 4's conventions)."""

from __future__ import annotations

PIPELINES: tuple = ()
