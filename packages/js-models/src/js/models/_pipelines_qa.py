"""The ``question-answering`` task of ``js.models.pipeline``, with transformers 4's conventions.

transformers 5 removed its ``QuestionAnsweringPipeline``; this one follows transformers 4.4x's
(its fast-tokenizer path), call conventions, options and outputs alike: the question and the
context are tokenised as a pair, truncated ``"only_second"`` to ``max_seq_len`` with the
overflowing windows ``doc_stride`` tokens apart, so a long context becomes several windows
(``spans``) run as one padded batch. In each window, the start and end logits of the tokens
that cannot hold an answer (the question, special tokens but ``[CLS]``) are set to -10000,
each is softmaxed, and the outer product of the two, limited to ``start <= end <
start + max_answer_len``, scores every span; the best are mapped to characters of the context
through the tokenizer's offsets (whole words with ``align_to_words``), answers of equal text
(ignoring case) from several windows add their scores, and the ``top_k`` best are returned.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._pipeline_base import Pipeline, _softmax

_TASK = "pipeline('question-answering')"
_PREPROCESS = ("doc_stride", "max_seq_len", "max_question_len")
_POSTPROCESS = ("top_k", "handle_impossible_answer", "max_answer_len", "align_to_words")
_MASKED = -10000.0  # transformers 4's logit for the tokens no answer may start or end on
_NULL = 1000000.0  # transformers 4's starting "no answer" score (before any window's)


class QuestionAnswering(Pipeline):
    """Extractive question answering (transformers 4's ``question-answering``):
    ``qa(question=..., context=...)``, ``qa({"question": ..., "context": ...})``, or lists of
    them (``question`` a list beside one ``context`` asks each of it), gives
    ``{"score", "start", "end", "answer"}`` (``start``/``end``: characters of the context), a
    list of them for ``top_k > 1``, and a list of those for several questions.

    Options: ``top_k`` (1), ``max_answer_len`` (15 tokens), ``handle_impossible_answer``
    (False; True adds the no-answer ``{"answer": ""}`` scored by ``[CLS]``), ``max_seq_len``
    (``min(model_max_length, 384)`` tokens per window), ``doc_stride`` (``min(max_seq_len //
    2, 128)`` tokens shared by consecutive windows), ``align_to_words`` (True: answers cover
    whole words) and ``max_question_len`` (64; as in transformers 4, only its slow tokenizers
    used it, so it changes nothing here). As in transformers 4, fewer than ``top_k`` answers
    may come back, and one answer comes back as a dict even where ``top_k > 1``."""

    task = "question-answering"

    def __call__(self, *args: Any, question=None, context=None, **options: Any) -> Any:
        side = self.tokenizer.padding_side  # transformers 4 puts the context first for "left"
        if side != "right":
            raise NotImplementedError(
                f"{_TASK}: the tokenizer pads on the {side!r}; only question-first tokenizers "
                "(padding on the 'right') are supported. Fix: padding_side='right' in its config"
            )
        items = _examples(args, question, context)
        options = {**self.options, **options}
        unknown = sorted(set(options) - {*_PREPROCESS, *_POSTPROCESS})
        if unknown:
            raise TypeError(
                f"{_TASK}: unknown options {unknown}. Fix: use {_POSTPROCESS + _PREPROCESS}"
            )
        for name in ("top_k", "max_answer_len"):
            if name in options and not (isinstance(options[name], int) and options[name] >= 1):
                raise ValueError(f"{_TASK}: {name} must be an int >= 1, got {options[name]!r}")
        results = [self.postprocess(row, **options) for row in self.run(items, options)]
        return results[0] if len(items) == 1 else results

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Each example with its windows, each window with its row of the model's outputs."""
        settings = {k: v for k, v in options.items() if k in _PREPROCESS}
        spans = [(i, span) for i, item in enumerate(items) for span in self.spans(item, **settings)]
        rows = super().run([span for _, span in spans], options)
        pairs = zip((i for i, _ in spans), rows, strict=True)
        for i, group in itertools.groupby(pairs, key=lambda pair: pair[0]):
            yield {"context": items[i]["context"], "spans": [row for _, row in group]}

    def spans(
        self, item: dict[str, str], *, doc_stride=None, max_seq_len=None, max_question_len=64
    ) -> list[dict[str, Any]]:
        """The windows of one question and context: tokens, ``p_mask`` (True where no answer
        may be) and the ``tokenizers.Encoding`` (for offsets)."""
        limit = self.tokenizer.model_max_length
        max_seq_len = min(limit or 384, 384) if max_seq_len is None else max_seq_len
        doc_stride = min(max_seq_len // 2, 128) if doc_stride is None else doc_stride
        if doc_stride > max_seq_len:
            raise ValueError(
                f"{_TASK}: doc_stride ({doc_stride}) is larger than max_seq_len ({max_seq_len}). "
                "Fix: a doc_stride below max_seq_len"
            )
        backend = self.tokenizer.backend
        backend.no_padding()
        backend.enable_truncation(
            max_seq_len, stride=doc_stride, strategy="only_second",
            direction=self.tokenizer.truncation_side,
        )  # fmt: skip
        try:
            encoding = backend.encode(item["question"], item["context"])
        except Exception as error:  # tokenizers' own (a question longer than the window...)
            raise ValueError(
                f"{_TASK}: the question and context do not split into windows of max_seq_len="
                f"{max_seq_len} tokens with doc_stride={doc_stride} ({error}). Fix: a larger "
                "max_seq_len, a smaller doc_stride or a shorter question"
            ) from None
        finally:
            backend.no_truncation()
        positions = getattr(self.config, "max_position_embeddings", None)
        if positions is not None and len(encoding.ids) > positions:
            raise ValueError(
                f"{_TASK}: windows of {len(encoding.ids)} tokens (max_seq_len={max_seq_len}), "
                f"and the model reads {positions} at most. Fix: max_seq_len={positions}"
            )
        return [self.span(window) for window in [encoding, *encoding.overflowing]]

    def span(self, encoding: Any) -> dict[str, Any]:
        p_mask = np.array([sequence != 1 for sequence in encoding.sequence_ids])
        p_mask[np.asarray(encoding.ids) == self.tokenizer.token_id("cls_token")] = False
        span = {"input_ids": encoding.ids, "attention_mask": encoding.attention_mask,
                "p_mask": p_mask, "encoding": encoding}  # fmt: skip
        if "token_type_ids" in self.tokenizer.model_input_names:
            span["token_type_ids"] = encoding.type_ids
        return span

    def preprocess(self, item: Any) -> dict[str, Any]:
        return item  # a window, tokenised by ``spans``

    def postprocess(
        self, row: dict[str, Any], *, top_k: int = 1, handle_impossible_answer: bool = False,
        max_answer_len: int = 15, align_to_words: bool = True, **preprocess: Any,
    ) -> Any:  # fmt: skip
        null, answers = _NULL, []
        candidates = top_k * 2 + 10 if align_to_words else top_k  # some merge into one answer
        for span in row["spans"]:
            length = len(span["input_ids"])
            start, end = (np.asarray(x[:length], np.float32) for x in span["outputs"])
            starts, ends, scores, null = _select(
                start, end, ~span["p_mask"], null, candidates, handle_impossible_answer,
                max_answer_len,
            )  # fmt: skip
            for s, e, score in zip(starts, ends, scores, strict=True):
                first, last = _characters(span["encoding"], int(s), int(e), align_to_words)
                answer = row["context"][first:last]
                same = [a for a in answers if a["answer"].lower() == answer.lower()]
                if same:
                    same[0]["score"] += float(score)
                else:
                    answers.append(
                        {"score": float(score), "start": first, "end": last, "answer": answer}
                    )
        if handle_impossible_answer:
            answers.append({"score": null, "start": 0, "end": 0, "answer": ""})
        answers = sorted(answers, key=lambda answer: answer["score"], reverse=True)[:top_k]
        return answers[0] if len(answers) == 1 else answers


def _examples(args: tuple, question: Any, context: Any) -> list[dict[str, str]]:
    """transformers 4's ``QuestionAnsweringArgumentHandler``: the examples of a call."""
    if args:
        both = len(args) == 2 and all(isinstance(a, str) for a in args)
        inputs = [{"question": args[0], "context": args[1]}] if both else (
            args[0] if len(args) == 1 else list(args)
        )  # fmt: skip
    elif question is not None and context is not None:
        questions = question if isinstance(question, list) else [question]
        contexts = context if isinstance(context, list) else [context] * len(questions)
        many_contexts = isinstance(context, list) and not isinstance(question, list)
        if len(questions) != len(contexts) or many_contexts:
            raise ValueError(
                f"{_TASK}: {len(questions)} questions and {len(contexts)} contexts. Fix: as many "
                "of each, or one context string for a list of questions"
            )
        inputs = [{"question": q, "context": c} for q, c in zip(questions, contexts, strict=True)]
    else:
        raise ValueError(
            f"{_TASK}: nothing to answer. Fix: question= and context=, a dict with both, or a "
            "list of such dicts"
        )
    inputs = [inputs] if isinstance(inputs, dict) else list(inputs)
    for item in inputs:
        if not isinstance(item, dict):
            raise TypeError(f"{_TASK}: {item!r} is not a {{'question', 'context'}} dict")
        for key in ("question", "context"):
            if not isinstance(item.get(key), str) or not item[key]:
                raise ValueError(
                    f"{_TASK}: {key}={item.get(key)!r} in {item!r}. Fix: a non-empty string"
                )
    return inputs


def _select(start, end, allowed, null, top_k, handle_impossible_answer, max_answer_len):
    """transformers 4's ``select_starts_ends`` on one window: the best spans and the
    no-answer score so far (``[CLS]``'s start and end probabilities)."""
    start = _softmax(np.where(allowed, start, np.float32(_MASKED)))
    end = _softmax(np.where(allowed, end, np.float32(_MASKED)))
    if handle_impossible_answer:
        null = min(null, float(start[0] * end[0]))
    start[0] = end[0] = 0.0
    outer = start[:, None] * end[None, :]  # [L, L]: start x end
    candidates = np.tril(np.triu(outer), max_answer_len - 1)
    best = np.argsort(-candidates.reshape(-1), kind="stable")[:top_k]
    starts, ends = np.unravel_index(best, candidates.shape)
    # transformers 4 tests membership in the 2-d mask's nonzero(), whose row indices (all 0)
    # let position 0 through.
    keep = np.union1d(np.flatnonzero(allowed), [0] if allowed.any() else [])
    desired = np.isin(starts, keep) & np.isin(ends, keep)
    starts, ends = starts[desired], ends[desired]
    return starts, ends, candidates[starts, ends], null


def _characters(encoding: Any, s: int, e: int, align_to_words: bool) -> tuple[int, int]:
    """The context's characters of tokens ``s..e``: the whole words around them with
    ``align_to_words`` (where the tokens belong to words), else the tokens' offsets."""
    if align_to_words:
        words = [encoding.token_to_word(s), encoding.token_to_word(e)]
        words = [encoding.word_to_chars(w, sequence_index=1) for w in words if w is not None]
        if len(words) == 2 and None not in words:
            return words[0][0], words[1][1]
    return encoding.offsets[s][0], encoding.offsets[e][1]


PIPELINES = (QuestionAnswering,)
