"""js.models.pipeline("question-answering") against transformers 4's algorithm run on transformers'
own tokenizer and model (transformers 5 has no question-answering pipeline, and no transformers 4
wheel is at hand): a tiny random BertForQuestionAnswering beside a WordPiece tokenizer trained
here. Answers, starts and ends equal, scores within 1e-4, a long context split into windows."""

from __future__ import annotations

import numpy as np
import pytest
from test_pipelines import _same, _save, _wordpiece, transformers

import js.models

torch = pytest.importorskip("torch")
from tokenizers import processors  # noqa: E402

CONTEXT = "john lives in london and likes tea"
LONG = (
    "my name is sarah and i work at the bank near the river . the quick brown fox jumps over "
    "the lazy dog in paris . hello world , how are you today ? john lives in london and likes tea"
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    backend = _wordpiece()
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )  # fmt: skip
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
        cls_token="[CLS]", mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],  # as BERT's
    )  # fmt: skip
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, initializer_range=0.3,
    )  # fmt: skip
    model = transformers.BertForQuestionAnswering(config)
    return _save(tmp_path_factory.mktemp("qa"), model, tokenizer)


@pytest.fixture(scope="module")
def pair(folder):
    """(js's pipeline, the reference on transformers' tokenizer and model)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.BertForQuestionAnswering.from_pretrained(folder).eval()
    return js.models.pipeline("question-answering", folder), (tokenizer, model)


def _reference(tokenizer, model, question, context, *, top_k=1, max_answer_len=15,
               handle_impossible_answer=False, max_seq_len=384, doc_stride=None,
               align_to_words=True):  # fmt: skip
    """transformers 4.4x's QuestionAnsweringPipeline (fast tokenizer, align_to_words) on one
    example, written from its preprocess, select_starts_ends, decode_spans and postprocess."""
    pre_topk = top_k * 2 + 10 if align_to_words else top_k
    doc_stride = min(max_seq_len // 2, 128) if doc_stride is None else doc_stride
    encoded = tokenizer(
        text=question, text_pair=context, truncation="only_second", max_length=max_seq_len,
        stride=doc_stride, return_token_type_ids=True, return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )  # fmt: skip
    answers, null = [], 1000000
    for i, ids in enumerate(encoded["input_ids"]):
        p_mask = np.array([[token != 1 for token in encoded.sequence_ids(i)]])
        p_mask[0, np.array(ids) == tokenizer.cls_token_id] = 0
        with torch.no_grad():
            out = model(**{k: torch.tensor([encoded[k][i]]) for k in tokenizer.model_input_names})
        start, end = out.start_logits.numpy(), out.end_logits.numpy()
        undesired = np.abs(p_mask.astype(int) - 1) & np.array([encoded["attention_mask"][i]])
        start = np.where(undesired == 0, -10000.0, start)
        end = np.where(undesired == 0, -10000.0, end)
        start = np.exp(start - start.max(axis=-1, keepdims=True))
        start = start / start.sum()
        end = np.exp(end - end.max(axis=-1, keepdims=True))
        end = end / end.sum()
        if handle_impossible_answer:
            null = min(null, (start[0, 0] * end[0, 0]).item())
        start[0, 0] = end[0, 0] = 0.0
        outer = np.matmul(np.expand_dims(start, -1), np.expand_dims(end, 1))
        candidates = np.tril(np.triu(outer), max_answer_len - 1)
        flat = candidates.flatten()
        idx = np.argpartition(-flat, pre_topk)[:pre_topk]
        starts, ends = np.unravel_index(idx[np.argsort(-flat[idx])], candidates.shape)[1:]
        desired = np.isin(starts, undesired.nonzero()) & np.isin(ends, undesired.nonzero())
        enc = encoded[i]
        for s, e in zip(starts[desired], ends[desired], strict=True):
            first, last = enc.offsets[s][0], enc.offsets[e][1]
            if align_to_words:
                try:  # v4: tokens outside words (special tokens) keep their offsets
                    first, last = (
                        enc.word_to_chars(enc.token_to_word(s), sequence_index=1)[0],
                        enc.word_to_chars(enc.token_to_word(e), sequence_index=1)[1],
                    )
                except Exception:
                    pass
            same = [a for a in answers if a["answer"].lower() == context[first:last].lower()]
            if same:
                same[0]["score"] += candidates[0, s, e].item()
            else:
                answers.append({"score": candidates[0, s, e].item(), "start": first,
                                "end": last, "answer": context[first:last]})  # fmt: skip
    if handle_impossible_answer:
        answers.append({"score": null, "start": 0, "end": 0, "answer": ""})
    answers = sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]
    return answers[0] if len(answers) == 1 else answers


@pytest.mark.parametrize(
    "question,context,options",
    [
        ("where does john live?", CONTEXT, {}),
        ("what does john like?", CONTEXT, {"top_k": 3, "max_answer_len": 3}),
        ("who?", LONG, {"top_k": 3, "max_seq_len": 24, "doc_stride": 6, "align_to_words": False}),
        ("who works at the bank?", LONG, {"top_k": 3, "max_seq_len": 32, "doc_stride": 8}),
        ("where is the fox?", LONG, {"handle_impossible_answer": True, "max_seq_len": 40}),
    ],
)
def test_question_answering_equals_transformers_4(pair, question, context, options):
    qa, (tokenizer, model) = pair
    ours = qa(question=question, context=context, **options)
    _same(ours, _reference(tokenizer, model, question, context, **options))
    if "max_seq_len" in options:  # several windows
        windowing = {k: v for k, v in options.items() if k in ("max_seq_len", "doc_stride")}
        assert len(qa.spans({"question": question, "context": context}, **windowing)) >= 2
    if options.get("top_k") == 3:
        assert len(ours) == 3


def test_question_answering_call_conventions(pair):
    qa = pair[0]
    one = qa(question="where does john live?", context=CONTEXT)
    assert qa({"question": "where does john live?", "context": CONTEXT}) == one
    assert qa("where does john live?", CONTEXT) == one
    questions = ["where does john live?", "what does john like?"]
    many = qa(question=questions, context=CONTEXT)  # one batch: float32 rounding apart
    _same(many, [one, qa(question=questions[1], context=CONTEXT)])
    assert qa([{"question": q, "context": CONTEXT} for q in questions]) == many
    assert qa(question=questions, context=[CONTEXT, CONTEXT]) == many


def test_question_answering_errors(pair):
    qa = pair[0]
    with pytest.raises(ValueError, match="nothing to answer"):
        qa(question="who?")
    with pytest.raises(ValueError, match="2 questions and 1 contexts"):
        qa(question=["a", "b"], context=["c"])
    with pytest.raises(ValueError, match="context='' in"):
        qa({"question": "who?", "context": ""})
    with pytest.raises(TypeError, match="is not a {'question', 'context'} dict"):
        qa(["who?"])
    with pytest.raises(TypeError, match=r"unknown options \['topk'\]"):
        qa("who?", CONTEXT, topk=2)
    with pytest.raises(ValueError, match="top_k must be an int >= 1, got 0"):
        qa("who?", CONTEXT, top_k=0)
    with pytest.raises(ValueError, match=r"doc_stride \(40\) is larger than max_seq_len \(32\)"):
        qa("who?", CONTEXT, max_seq_len=32, doc_stride=40)
    with pytest.raises(ValueError, match="do not split into windows of max_seq_len=8"):
        qa("where does john live in the world?", LONG, max_seq_len=8, doc_stride=2)
    with pytest.raises(ValueError, match="and the model reads 64 at most. Fix: max_seq_len=64"):
        qa("who?", LONG * 2)  # the default max_seq_len, 384
    qa.tokenizer.padding_side = "left"  # a context-first tokenizer (XLNet's)
    try:
        with pytest.raises(
            NotImplementedError, match="pads on the 'left'.*Fix: padding_side='right'"
        ):
            qa("who?", CONTEXT)
    finally:
        qa.tokenizer.padding_side = "right"
