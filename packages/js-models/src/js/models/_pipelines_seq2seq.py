"""The encoder-decoder tasks of ``js.models.pipeline``: ``text2text-generation``,
``summarization``, ``translation`` and ``automatic-speech-recognition``."""

from __future__ import annotations

PIPELINES: tuple = ()
