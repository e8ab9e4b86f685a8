"""What transformers 5 changes in ``tokenizer.json`` for a folder's ``tokenizer_class``.

transformers 5's model-specific tokenizer classes (``LlamaTokenizer``, ``GemmaTokenizer``,
``Qwen2Tokenizer``, ``T5Tokenizer``, ``RobertaTokenizer``/``BartTokenizer``, ``GPT2Tokenizer``,
``WhisperTokenizer``, ``BertTokenizer``, ``XLMRobertaTokenizer``) keep only the vocabulary (and
merges) of ``tokenizer.json``: their ``__init__`` builds the model options, normalizer,
pre-tokenizer and decoder again from ``tokenizer_config.json`` (``add_prefix_space``,
``legacy``, ``do_lower_case``...), and some the post-processor too. ``CLASSES`` holds, per
class, the same rebuild applied to ``tokenizer.json``'s contents, and the class's padding side.
``tokenizer_config.json``'s ``add_bos_token``/``add_eos_token`` change nothing there either.
Other classes (``PreTrainedTokenizerFast``, ``TokenizersBackend``...) run ``tokenizer.json`` as
written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

# Qwen 2's split of text into words before the byte-level BPE (tokenization_qwen2.py)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


class Rebuild(NamedTuple):
    """A class's ``__init__``: ``model`` gives the model options it sets (JSON fields of
    ``tokenizer.json``'s ``model``), ``steps`` sets the backend's pipeline from the config."""

    model: Callable[[Mapping[str, Any]], dict[str, Any]]
    steps: Callable[[Any, Mapping[str, Any], Any], None]
    padding_side: str = "right"


def _bpe(unk: str | None = None, *, byte_fallback: bool = False, fuse_unk: bool = False) -> dict:
    return {"dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": fuse_unk, "byte_fallback": byte_fallback,
            "ignore_merges": False}  # fmt: skip


def _token(config: Mapping[str, Any], name: str, default: str) -> str:
    """A named special token of the config (a string or an ``AddedToken`` record), or the
    class's default."""
    token = config.get(name) or default
    return token["content"] if isinstance(token, dict) else token


def _sentencepiece_decoder(tk: Any, strip: bool) -> Any:
    steps = [tk.decoders.Replace("▁", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse()]
    return tk.decoders.Sequence([*steps, tk.decoders.Strip(" ", 1, 0)] if strip else steps)


def _llama(backend: Any, config: Mapping[str, Any], tk: Any) -> None:
    """``LlamaTokenizer``: ``▁`` prepended by a ``Metaspace`` pre-tokenizer (to the first piece
    only unless ``legacy``), no normalizer: the hub's ``Prepend`` normalizer is replaced."""
    prefix = config.get("add_prefix_space")
    prefix = True if prefix is None else prefix
    scheme = ("always" if config.get("legacy", False) else "first") if prefix else "never"
    backend.normalizer = None
    backend.pre_tokenizer = tk.pre_tokenizers.Metaspace("▁", prepend_scheme=scheme, split=False)
    backend.decoder = _sentencepiece_decoder(tk, strip=prefix)


def _gemma(backend: Any, config: Mapping[str, Any], tk: Any) -> None:
    backend.normalizer = tk.normalizers.Replace(" ", "▁")
    backend.pre_tokenizer = tk.pre_tokenizers.Split(" ", behavior="merged_with_previous")
    backend.decoder = _sentencepiece_decoder(tk, strip=False)


def _byte_level(backend: Any, config: Mapping[str, Any], tk: Any) -> None:
    """GPT-2, RoBERTa/BART and Whisper: byte-level BPE, no normalizer."""
    backend.normalizer = None
    prefix = bool(config.get("add_prefix_space", False))
    backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=prefix)
    backend.decoder = tk.decoders.ByteLevel()


def _qwen2(backend: Any, config: Mapping[str, Any], tk: Any) -> None:
    backend.normalizer = tk.normalizers.NFC()
    split = tk.pre_tokenizers.Split(tk.Regex(_QWEN2_SPLIT), behavior="isolated")
    prefix = bool(config.get("add_prefix_space") or False)
    level = tk.pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=False)
    backend.pre_tokenizer = tk.pre_tokenizers.Sequence([split, level])
    backend.decoder = tk.decoders.ByteLevel()


def _roberta(backend: Any, config: Mapping[str, Any], tk: Any) -> None:
    _byte_level(backend, config, tk)
    sep, cls = _token(config, "sep_token", "</s>"), _token(config, "cls_token", "<s>")
    backend.post_processor = tk.processors.RobertaProcessing(
        (sep, backend.token_to_id(sep)), (cls, backend.token_to_id(cls)),
        trim_offsets=config.get("trim_offsets", True),
        add_prefix_space=bool(config.get("add_prefix_space", False)),
    )  # fmt: skip


def _whisper(backend: Any, config: Mapping[str, Any], tk: Any) -> None:
    """``WhisperTokenizer``'s ``set_prefix_tokens``: ``<|startoftranscript|>``, the language and
    task tokens the config names, ``<|notimestamps|>`` unless ``predict_timestamps``, the text,
    then ``eos``."""
    _byte_level(backend, config, tk)
    language, task = config.get("language"), config.get("task")
    if language is not None and f"<|{language}|>" not in backend.get_vocab():
        raise ValueError(
            f"Tokenizer: WhisperTokenizer's language={language!r} is not a language code of the "
            "vocabulary. Fix: write its code in tokenizer_config.json (e.g. 'en' for english)"
        )
    prefix = ["<|startoftranscript|>"]
    prefix += [f"<|{language}|>"] if language is not None else []
    prefix += [f"<|{task}|>"] if task is not None else []
    prefix += [] if config.get("predict_timestamps") else ["<|notimestamps|>"]
    eos = _token(config, "eos_token", "<|endoftext|>")
    _template(backend, tk, prefix, [eos], [*prefix, "$A:0", "$B:1", f"{eos}:1"])


def _template(backend: Any, tk: Any, before: list[str], after: list[str], pair: list) -> None:
    """A ``TemplateProcessing``: ``before`` + the text + ``after``; ``pair`` for two texts."""
    named = dict.fromkeys(t.split(":")[0] for t in [*before, *after, *pair] if t[0] != "$")
    backend.post_processor = tk.processors.TemplateProcessing(
        single=[*before, "$A", *after], pair=pair,
        special_tokens=[(t, backend.token_to_id(t)) for t in named],
    )  # fmt: skip


def _metaspace_words(backend: Any, tk: Any, scheme: str, **options: Any) -> None:
    """T5 and XLM-R: whitespace-split words, ``▁`` before each; only a SentencePiece
    ``Precompiled`` normalizer of ``tokenizer.json`` is kept."""
    normalizer = backend.normalizer
    steps = list(normalizer) if isinstance(normalizer, tk.normalizers.Sequence) else [normalizer]
    kept = [step for step in steps if isinstance(step, tk.normalizers.Precompiled)]
    backend.normalizer = kept[0] if kept else None
    metaspace = tk.pre_tokenizers.Metaspace("▁", prepend_scheme=scheme, **options)
    backend.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [tk.pre_tokenizers.WhitespaceSplit(), metaspace]
    )
    backend.decoder = tk.decoders.Metaspace("▁", prepend_scheme=scheme, **options)


def _t5(backend: Any, config: Mapping[str, Any], tk: Any) -> None:
    _metaspace_words(backend, tk, "always", split=True)
    eos = _token(config, "eos_token", "</s>")  # written "</s>" by T5Tokenizer, its id eos's
    backend.post_processor = tk.processors.TemplateProcessing(
        single=["$A", "</s>"], pair=["$A", "</s>", "$B", "</s>"],
        special_tokens=[("</s>", backend.token_to_id(eos))],
    )  # fmt: skip


def _xlm_roberta(backend: Any, config: Mapping[str, Any], tk: Any) -> None:
    prefix = config.get("add_prefix_space", True)
    _metaspace_words(backend, tk, "always" if prefix else "never")
    bos, eos = _token(config, "bos_token", "<s>"), _token(config, "eos_token", "</s>")
    _template(backend, tk, [bos], [eos], [bos, "$A", eos, eos, "$B", eos])


def _bert(backend: Any, config: Mapping[str, Any], tk: Any) -> None:
    backend.normalizer = tk.normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=config.get("tokenize_chinese_chars", True),
        strip_accents=config.get("strip_accents"), lowercase=config.get("do_lower_case", True),
    )  # fmt: skip
    backend.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    backend.decoder = tk.decoders.WordPiece(prefix="##")
    cls, sep = _token(config, "cls_token", "[CLS]"), _token(config, "sep_token", "[SEP]")
    _template(backend, tk, [f"{cls}:0"], [f"{sep}:0"], [cls, "$A", sep, "$B:1", f"{sep}:1"])


_BYTE_LEVEL_BPE = _bpe() | {"continuing_subword_prefix": "", "end_of_word_suffix": ""}
CLASSES: dict[str, Rebuild] = {
    "LlamaTokenizer": Rebuild(
        lambda c: _bpe(fuse_unk=True, byte_fallback=True), _llama, padding_side="left"
    ),
    "GemmaTokenizer": Rebuild(
        lambda c: _bpe(_token(c, "unk_token", "<unk>"), fuse_unk=True, byte_fallback=True),
        _gemma,
        padding_side="left",
    ),
    "Qwen2Tokenizer": Rebuild(lambda c: _BYTE_LEVEL_BPE, _qwen2),
    "GPT2Tokenizer": Rebuild(lambda c: _BYTE_LEVEL_BPE, _byte_level),
    "RobertaTokenizer": Rebuild(lambda c: _BYTE_LEVEL_BPE, _roberta),
    "WhisperTokenizer": Rebuild(lambda c: _BYTE_LEVEL_BPE, _whisper),
    "T5Tokenizer": Rebuild(lambda c: {"unk_id": 2, "byte_fallback": False}, _t5),
    "XLMRobertaTokenizer": Rebuild(lambda c: {"unk_id": 3, "byte_fallback": False}, _xlm_roberta),
    "BertTokenizer": Rebuild(
        lambda c: {
            "unk_token": _token(c, "unk_token", "[UNK]"),
            "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100,
        },  # fmt: skip
        _bert,
    ),
}
CLASSES["BartTokenizer"] = CLASSES["RobertaTokenizer"]  # an alias there
# BertTokenizer's subclasses and aliases, its __init__ theirs
BERT_LIKE = ("BertTokenizer", "DistilBertTokenizer", "ConvBertTokenizer", "MobileBertTokenizer",
             "SqueezeBertTokenizer", "DPRContextEncoderTokenizer",
             "DPRQuestionEncoderTokenizer")  # fmt: skip
CLASSES.update(dict.fromkeys(BERT_LIKE, CLASSES["BertTokenizer"]))


def rebuild_of(config: Mapping[str, Any]) -> Rebuild | None:
    """The rebuild of the config's ``tokenizer_class`` (``...Fast`` names are the same class
    in transformers 5), None for a class that runs ``tokenizer.json`` as written."""
    name = str(config.get("tokenizer_class") or "").removesuffix("Fast")
    return CLASSES.get(name)


def rebuild(text: str, config: Mapping[str, Any], tk: Any) -> Any:
    """The ``tokenizers.Tokenizer`` transformers 5 runs for ``tokenizer.json``'s ``text`` and
    the config: the file as written for a class without a rebuild."""
    found = rebuild_of(config)
    if found is None:
        return tk.Tokenizer.from_str(text)
    spec = json.loads(text)
    spec["model"] = {**spec["model"], **found.model(config)}
    backend = tk.Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    found.steps(backend, config, tk)
    return backend
