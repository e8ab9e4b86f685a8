"""``js.models.pipeline(task, folder)``: text, images or chats in, transformers' pipeline outputs
out, from a local model folder (its weights, ``tokenizer.json``, ``preprocessor_config.json``).

Each task is a small ``Pipeline`` subclass (``_pipeline_base.py``), in a module per kind of task:
``_pipelines_encoder.py``, ``_pipelines_vision.py``, ``_pipelines_generation.py``,
``_pipelines_qa.py`` and ``_pipelines_seq2seq.py``. Batches are
padded to bucketed shapes, so a stream of requests of any lengths compiles a bounded number of
programs (``TRACES`` counts them). ``text-generation`` hands its left-padded prompts to
``js.models.generate``, which buckets its own shapes.

Tasks (transformers 5.23's names and call conventions): ``feature-extraction``,
``sentence-similarity`` (the Hugging Face hub's task, which transformers lacks),
``text-classification``, ``fill-mask``, ``token-classification``, ``image-classification``,
``zero-shot-image-classification``, ``text-generation`` (``streamer=`` streams its text) and
``automatic-speech-recognition`` (Whisper). transformers 5 removed ``question-answering``,
``text2text-generation``, ``summarization`` and ``translation`` (``translation_xx_to_yy``);
those follow transformers 4's conventions and outputs.
"""

from __future__ import annotations

import os
import re
from typing import Any

from . import (
    _pipelines_encoder,
    _pipelines_generation,
    _pipelines_qa,
    _pipelines_seq2seq,
    _pipelines_vision,
)
from ._pipeline_base import TRACES, Pipeline

__all__ = ["TASKS", "TRACES", "Pipeline", "pipeline"]

# Each task's pipeline class, under transformers' name and its aliases.
TASKS: dict[str, type[Pipeline]] = {
    name: cls
    for module in (
        _pipelines_encoder,
        _pipelines_vision,
        _pipelines_generation,
        _pipelines_qa,
        _pipelines_seq2seq,
    )
    for cls in module.PIPELINES
    for name in (cls.task, *cls.aliases)
}


def pipeline(task: str, folder: str | os.PathLike, **options: Any) -> Pipeline:
    """A task's pipeline on a local model folder, as transformers' ``pipeline(task, model)``.

    Args:
        task: one of ``TASKS`` (transformers' names: ``"text-classification"``, ``"fill-mask"``,
            ``"token-classification"``, ``"question-answering"``, ``"feature-extraction"``,
            ``"sentence-similarity"`` (a sentence-transformers folder),
            ``"image-classification"``, ``"zero-shot-image-classification"``,
            ``"text-generation"``, ``"text2text-generation"``, ``"summarization"``,
            ``"translation"`` or ``"translation_xx_to_yy"``,
            ``"automatic-speech-recognition"``).
        folder: the model folder (``config.json``, weights, tokenizer or preprocessor files).
        options: ``batch_size`` (default 8), ``dtype``, and call options every call uses
            (``top_k``, ``max_new_tokens``...).

    Returns:
        The ``Pipeline``: call it with an input or a list of inputs.

    Example:
        >>> classify = js.models.pipeline("text-classification", "folder")  # doctest: +SKIP
        >>> classify("a fine day")  # doctest: +SKIP
        [{'label': 'POSITIVE', 'score': 0.98}]
    """
    pair = re.fullmatch(r"translation_(\w+?)_to_(\w+)", task)
    cls = TASKS.get(task) or (_pipelines_seq2seq.language_pair(*pair.groups()) if pair else None)
    if cls is None:
        raise KeyError(f"js.models.pipeline: unknown task {task!r}. Fix: one of {sorted(TASKS)}")
    return cls(folder, **options)
