"""The encoder tasks of ``js.models.pipeline``: ``feature-extraction``, ``sentence-similarity``,
``text-classification``, ``fill-mask`` and ``token-classification`` (transformers' outputs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ._pipeline_base import Pipeline, _softmax
from .sentence_transformers import SentenceTransformer


class FeatureExtraction(Pipeline):
    """The last hidden state of each text, ``[1, L, H]`` nested lists (transformers'
    ``feature-extraction``; ``return_tensors=True``: a NumPy array)."""

    task = "feature-extraction"

    def load_model(self, dtype: Any) -> Any:
        model = super().load_model(dtype)
        return getattr(model, "base_model", model)

    def postprocess(self, row: dict[str, Any], *, return_tensors: bool = False) -> Any:
        hidden = row["outputs"][0][None, : len(row["input_ids"])]  # [1, L, H]
        return hidden if return_tensors else hidden.tolist()


class SentenceSimilarity(Pipeline):
    """The similarities of ``{"source_sentence": str, "sentences": [str]}`` (a list of
    floats, the Hugging Face inference API's ``sentence-similarity``) from a
    sentence-transformers folder's embeddings and ``similarity_fn_name`` (default cosine)."""

    task = "sentence-similarity"
    files = ("modules.json",)

    def load_model(self, dtype: Any) -> Any:
        return SentenceTransformer(self.folder)

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for item in items:
            source = self.model.encode(item["source_sentence"], batch_size=self.batch_size)
            others = self.model.encode(item["sentences"], batch_size=self.batch_size)
            yield {"outputs": np.asarray(self.model.similarity(source, others))[0]}

    def postprocess(self, row: dict[str, Any], **options: Any) -> list[float]:
        return row["outputs"].tolist()


class TextClassification(Pipeline):
    """``[{"label", "score"}]`` of each text (transformers' ``text-classification``: the best
    label alone unless ``top_k`` is given, then the ``top_k`` best; None: all)."""

    task = "text-classification"
    aliases = ("sentiment-analysis",)

    def __call__(self, inputs: Any, **options: Any) -> Any:
        result = super().__call__(inputs, **options)
        legacy = "top_k" not in {**self.options, **options}
        return [result] if isinstance(inputs, str) and legacy else result

    def postprocess(
        self, row: dict[str, Any], *, top_k: int | None | str = "", function_to_apply=None
    ) -> Any:
        scores = self.scores(row["outputs"], function_to_apply)
        if top_k == "":
            return self.labelled(scores, 1)[0]
        return self.labelled(scores, top_k)  # type: ignore[arg-type]


class FillMask(Pipeline):
    """The ``top_k`` (default 5) fillings of the mask token of each text:
    ``[{"score", "token", "token_str", "sequence"}]`` (a list per mask where there are several)."""

    task = "fill-mask"

    def postprocess(self, row: dict[str, Any], *, top_k: int = 5) -> Any:
        ids = np.asarray(row["input_ids"])
        masks = np.flatnonzero(ids == self.tokenizer.token_id("mask_token"))
        if not len(masks):
            raise ValueError(
                f"pipeline('fill-mask'): no {self.tokenizer.special_tokens['mask_token']!r} in "
                f"the text {self.tokenizer.decode(ids)!r}. Fix: put the mask token in it"
            )
        probs = _softmax(row["outputs"][masks].astype(np.float32))  # [masks, V]
        single = len(masks) == 1
        pad = self.tokenizer.pad_token_id
        result = []
        for mask, p in zip(masks, probs, strict=True):
            best = np.argsort(-p, kind="stable")[:top_k]
            fills = []
            for token in best.tolist():
                filled = np.where(np.arange(len(ids)) == mask, token, ids)
                filled = filled[filled != pad]
                fills.append({
                    "score": float(p[token]), "token": token,
                    "token_str": self.tokenizer.decode([token]),
                    "sequence": self.tokenizer.decode(filled, skip_special_tokens=single),
                })  # fmt: skip
            result.append(fills)
        return result[0] if single else result


class TokenClassification(Pipeline):
    """The labelled tokens of each text (transformers' ``token-classification``):
    ``aggregation_strategy="none"`` (default): ``{"entity", "score", "index", "word", "start",
    "end"}`` per token; ``"simple"``: adjacent tokens of one entity grouped into
    ``{"entity_group", "score", "word", "start", "end"}``. Labels in ``ignore_labels``
    (default ``["O"]``) are dropped."""

    task = "token-classification"
    aliases = ("ner",)

    def preprocess(self, item: Any) -> dict[str, Any]:
        row = super().preprocess(item)
        encoding = self.tokenizer.backend.encode(item)  # as configured by that call
        return {**row, "text": item, "offsets": encoding.offsets,
                "special": encoding.special_tokens_mask}  # fmt: skip

    def postprocess(
        self, row: dict[str, Any], *, aggregation_strategy: str = "none", ignore_labels=None
    ) -> list[dict[str, Any]]:
        if aggregation_strategy not in ("none", "simple"):
            raise NotImplementedError(
                f"pipeline('token-classification'): aggregation_strategy="
                f"{aggregation_strategy!r}. Fix: 'none' or 'simple'"
            )
        ignore = ["O"] if ignore_labels is None else ignore_labels
        scores = _softmax(row["outputs"][: len(row["input_ids"])].astype(np.float32))
        entities = []
        for index, (token, (start, end), special) in enumerate(
            zip(row["input_ids"], row["offsets"], row["special"], strict=True)
        ):
            if special:
                continue
            best = int(scores[index].argmax())
            word = self.tokenizer.convert_ids_to_tokens(token)
            if token == self.tokenizer.unk_token_id:
                word = row["text"][start:end]
            entities.append({"entity": self.config.id2label[best], "score": scores[index, best],
                             "index": index, "word": word, "start": start, "end": end})  # fmt: skip
        if aggregation_strategy == "simple":
            entities = [self.grouped(group) for group in _groups(entities)]
        key = "entity" if aggregation_strategy == "none" else "entity_group"
        return [entity for entity in entities if entity[key] not in ignore]

    def grouped(self, entities: list[dict[str, Any]]) -> dict[str, Any]:
        """transformers' ``group_sub_entities``: one entity of adjacent tokens."""
        decoder = self.tokenizer.backend.decoder
        tokens = [entity["word"] for entity in entities]
        return {
            "entity_group": entities[0]["entity"].split("-", 1)[-1],
            "score": np.float32(np.mean([entity["score"] for entity in entities])),
            "word": decoder.decode(tokens) if decoder else " ".join(tokens),
            "start": entities[0]["start"],
            "end": entities[-1]["end"],
        }


def _tag(entity: str) -> tuple[str, str]:
    """``("B"|"I", tag)`` of a label (one without a prefix counts as "I")."""
    return (entity[0], entity[2:]) if entity[:2] in ("B-", "I-") else ("I", entity)


def _groups(entities: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Runs of tokens of one tag, each opened by a "B-" or a change of tag."""
    group: list[dict[str, Any]] = []
    for entity in entities:
        bi, tag = _tag(entity["entity"])
        if group and (tag != _tag(group[-1]["entity"])[1] or bi == "B"):
            yield group
            group = []
        group.append(entity)
    if group:
        yield group


PIPELINES = (
    FeatureExtraction,
    SentenceSimilarity,
    TextClassification,
    FillMask,
    TokenClassification,
)
