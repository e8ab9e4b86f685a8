"""The image tasks of ``js.models.pipeline``: ``image-classification`` and
``zero-shot-image-classification`` (CLIP and SigLIP)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._pipeline_base import Pipeline, _forward, _sigmoid, _softmax
from .image_processor import ImageProcessor


class ImageClassification(Pipeline):
    """The ``top_k`` (default 5) ``[{"label", "score"}]`` of each image (a PIL image or a
    uint8 ``[H, W, C]`` array), through the folder's ``preprocessor_config.json``."""

    task = "image-classification"
    files = ("preprocessor_config.json",)
    model_inputs = ("pixel_values",)

    def __init__(self, folder: str | os.PathLike, **options: Any):
        super().__init__(folder, **options)
        self.processor = ImageProcessor.from_pretrained(self.folder)

    def preprocess(self, item: Any) -> dict[str, Any]:
        return {"pixel_values": self.processor(item)["pixel_values"][0]}

    def postprocess(self, row: dict[str, Any], *, top_k: int = 5, function_to_apply=None) -> Any:
        return self.labelled(self.scores(row["outputs"], function_to_apply), top_k)


class ZeroShotImageClassification(ImageClassification):
    """``[{"score", "label"}]`` of each image against ``candidate_labels`` written into
    ``hypothesis_template`` (CLIP: softmax over the labels; SigLIP: each label's sigmoid),
    best first. One model call per image (its texts are the batch)."""

    task = "zero-shot-image-classification"
    files = ("preprocessor_config.json", "tokenizer.json")
    model_inputs = ("pixel_values", "input_ids", "attention_mask")

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        labels = options.get("candidate_labels")
        if not labels:
            raise ValueError(
                "pipeline('zero-shot-image-classification'): no candidate_labels. Fix: pass "
                "candidate_labels=['a cat', ...]"
            )
        template = options.get("hypothesis_template", "This is a photo of {}.")
        texts = [template.format(label) for label in labels]
        siglip = "siglip" in self.config.model_type
        padding = {"padding": "max_length", "max_length": 64, "truncation": True} if siglip else {}
        tokens = self.tokenizer(texts, **(padding or {"padding": True}))
        for item in items:
            inputs = {**tokens, "pixel_values": self.preprocess(item)["pixel_values"][None]}
            names = [k for k in self.model_inputs if k in inputs]
            outputs = _forward(self.model, {k: inputs[k] for k in names})
            yield {"labels": labels, "outputs": np.asarray(outputs[0])[0], "siglip": siglip}

    def postprocess(self, row: dict[str, Any], **options: Any) -> Any:
        logits = row["outputs"].astype(np.float32)  # [labels]
        scores = _sigmoid(logits) if row["siglip"] else _softmax(logits)
        order = sorted(zip(scores.tolist(), row["labels"], strict=True), key=lambda x: -x[0])
        return [{"score": score, "label": label} for score, label in order]


PIPELINES = (ImageClassification, ZeroShotImageClassification)
