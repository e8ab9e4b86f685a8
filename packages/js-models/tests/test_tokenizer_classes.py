"""js.models.Tokenizer against transformers 5's AutoTokenizer on folders whose
``tokenizer_config.json`` names a model-specific class (``tokenizer_class``): transformers 5
rebuilds the normalizer, pre-tokenizer, decoder and post-processor in those classes' ``__init__``
instead of running ``tokenizer.json`` as written, and js follows it (``_tokenizer_classes``).
Each tokenizer is trained here, shaped like its hub original (and, for some, with a config or
a ``tokenizer.json`` that the class overrides: ``legacy``, ``add_prefix_space``,
``do_lower_case``, Whisper's language and task, an NFKC normalizer T5 drops, Llama 3's digit
split under ``Qwen2Tokenizer``), and saved by the family's transformers class. Ids, masks,
padding and decoded text are equal. Nothing downloads."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llama_support import transformers_without_torchvision

from js.models import Tokenizer

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")
with transformers_without_torchvision() as transformers:
    pass
from tokenizers import (  # noqa: E402  # noqa: E402
    AddedToken,
    Regex,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from tokenizers import Tokenizer as Backend  # noqa: E402

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "Hello world, how are you today? I'm fine, don't worry!",
    "Tokenizers turn text into ids and ids back into text.",
    "Ünïcödé, café and naïve are words too",
    "numbers like 2024, 12345 and 3.14",
] * 4
# GPT-2/Llama-3/Qwen's split of text into words before byte-level BPE
SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _specials(texts):
    """Texts with the folder's special tokens written inside, beside the plain ones."""
    return [
        "Hello world!",
        " leading space and  two  spaces ",
        "Ünïcödé café 日本 😀",
        "don't stop , he 's here .",
        "12345 apples cost 3.14\n\nnew  line",
        "ﬁne ① ＡＢ",
        *texts,
    ]


def _train(backend, trainer_class, specials, **options):
    backend.train_from_iterator(CORPUS, trainer_class(special_tokens=specials, **options))
    return backend


def _byte_level(specials, *, split=False, prefix_space=False):
    """GPT-2 (``split=False``) or Llama-3/Qwen 2 (the regex split first) byte-level BPE."""
    backend = Backend(models.BPE())
    level = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space, use_regex=not split)
    if split:
        split_words = pre_tokenizers.Split(Regex(SPLIT), behavior="isolated")
        level = pre_tokenizers.Sequence([split_words, level])
    backend.pre_tokenizer = level
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    return _train(backend, trainers.BpeTrainer, specials, vocab_size=300, initial_alphabet=alphabet)


def _sentencepiece_bpe(specials, *, gemma=False):
    """Llama 2 / Mistral (Prepend + Replace, Strip on decoding) or Gemma (Replace only) BPE with
    the 256 ``<0xNN>`` byte tokens after the specials."""
    backend = Backend(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    steps = [normalizers.Replace(" ", "▁")]
    backend.normalizer = normalizers.Sequence(
        steps if gemma else [normalizers.Prepend("▁"), *steps]
    )
    decoding = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    backend.decoder = decoders.Sequence(
        decoding if gemma else [*decoding, decoders.Strip(" ", 1, 0)]
    )
    _train(backend, trainers.BpeTrainer, specials, vocab_size=200)
    spec = json.loads(backend.to_str())
    vocab = list(spec["model"]["vocab"])
    n = len(specials)
    order = vocab[:n] + [f"<0x{i:02X}>" for i in range(256)] + vocab[n:]
    spec["model"]["vocab"] = {t: i for i, t in enumerate(order)}
    for token in spec["added_tokens"]:
        token["id"] = order.index(token["content"])
    backend = Backend.from_str(json.dumps(spec))
    bos = specials[2] if gemma else specials[1]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos}:1 $B:1",
        special_tokens=[(bos, backend.token_to_id(bos))],
    )  # fmt: skip
    return backend


def _unigram(specials, template, *, nfkc=False):
    """T5 / XLM-R: Unigram over whitespace-split words with ``▁`` prepended to each (``nfkc``:
    an NFKC normalizer where the hub's has SentencePiece's ``Precompiled`` one)."""
    backend = Backend(models.Unigram())
    backend.normalizer = normalizers.NFKC() if nfkc else None
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(prepend_scheme="always")]
    )
    backend.decoder = decoders.Metaspace(prepend_scheme="always")
    unk = specials.index("<unk>")
    _train(backend, trainers.UnigramTrainer, specials, vocab_size=150, unk_token="<unk>")
    single, pair = template
    named = dict.fromkeys(t for t in f"{single} {pair}".split() if t[0] == "<")
    backend.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, backend.token_to_id(t)) for t in named]
    )
    assert backend.token_to_id("<unk>") == unk
    return backend


def _wordpiece():
    backend = Backend(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    _train(backend, trainers.WordPieceTrainer, specials, vocab_size=150)
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )  # fmt: skip
    return backend


def _roberta():
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    backend = _byte_level(specials)
    backend.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return backend


def _whisper():
    specials = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>",
                "<|transcribe|>", "<|notimestamps|>"]  # fmt: skip
    backend = _byte_level(specials)
    backend.post_processor = processors.TemplateProcessing(
        single="<|startoftranscript|> <|notimestamps|> $A <|endoftext|>",
        pair="<|startoftranscript|> <|notimestamps|> $A $B:1 <|endoftext|>:1",
        special_tokens=[
            ("<|startoftranscript|>", 1),
            ("<|notimestamps|>", 5),
            ("<|endoftext|>", 0),
        ],
    )
    return backend


ROBERTA = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
           "unk_token": "<unk>", "pad_token": "<pad>",
           "mask_token": AddedToken("<mask>", lstrip=True, special=True)}  # fmt: skip
T5 = ["<pad>", "</s>", "<unk>", "<extra_id_1>", "<extra_id_0>"]
GEMMA = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
LLAMA = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
         "add_eos_token": False}  # fmt: skip
# name -> (the transformers class that saves it, its backend, the class's arguments, and config
# fields written after saving, as hub folders have them)
FOLDERS = {
    "llama2": ("LlamaTokenizer", lambda: _sentencepiece_bpe(["<unk>", "<s>", "</s>"]),
               LLAMA, {"legacy": False}),
    "mistral": ("LlamaTokenizer", lambda: _sentencepiece_bpe(["<unk>", "<s>", "</s>"]),
                LLAMA, {"legacy": True}),
    "llama3": ("PreTrainedTokenizerFast",
               lambda: _byte_level(["<|begin_of_text|>", "<|eot_id|>"], split=True),
               {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "gemma": ("GemmaTokenizer",
              lambda: _sentencepiece_bpe(GEMMA, gemma=True),
              {"add_bos_token": True, "add_eos_token": False}),
    "qwen2": ("Qwen2Tokenizer",
              lambda: _byte_level(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], split=True),
              {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None}),
    "t5": ("T5Tokenizer",
           lambda: _unigram(T5, ("$A </s>", "$A </s> $B </s>")),
           {"extra_ids": 2}),
    "t5-nfkc": ("T5Tokenizer", lambda: _unigram(T5, ("$A </s>", "$A </s> $B </s>"), nfkc=True),
                {"extra_ids": 2}),
    "bart": ("BartTokenizer", _roberta, ROBERTA),
    "roberta-prefix": ("RobertaTokenizer", _roberta, ROBERTA, {"add_prefix_space": True}),
    "roberta": ("RobertaTokenizer", _roberta, ROBERTA),
    "gpt2": ("GPT2Tokenizer", lambda: _byte_level(["<|endoftext|>"]),
             {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "unk_token": "<|endoftext|>"}),
    "whisper": ("WhisperTokenizer", _whisper, {"pad_token": "<|endoftext|>"}),
    "whisper-en": ("WhisperTokenizer", _whisper, {"pad_token": "<|endoftext|>"},
                   {"language": "en", "task": "transcribe"}),
    "bert": ("BertTokenizer", _wordpiece, {}),
    "bert-cased": ("BertTokenizer", _wordpiece, {}, {"do_lower_case": False}),
    "distilbert": ("DistilBertTokenizer", _wordpiece, {}),
    "mobilebert": ("MobileBertTokenizer", _wordpiece, {}, {"do_lower_case": False}),
    "xlm-roberta": ("XLMRobertaTokenizer",
                    lambda: _unigram(["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                     ("<s> $A </s>", "<s> $A </s> </s> $B </s>")),
                    {}),
}  # fmt: skip


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """name -> (js's Tokenizer, transformers' AutoTokenizer) of each folder, built once."""
    made = {}
    for name, (cls, backend, options, *fields) in FOLDERS.items():
        folder = tmp_path_factory.mktemp(name)
        getattr(transformers, cls)(tokenizer_object=backend(), **options).save_pretrained(folder)
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config.update(*fields)
        if cls != "PreTrainedTokenizerFast":  # aliases (BART's, MobileBERT's) save their target
            config["tokenizer_class"] = cls  # a hub folder names its own
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        made[name] = (
            Tokenizer.from_pretrained(folder),
            transformers.AutoTokenizer.from_pretrained(folder),
        )
    return made


def _same(ours, theirs):
    assert set(ours) == set(theirs)
    for key in ours:
        np.testing.assert_array_equal(ours[key], np.asarray(theirs[key]), err_msg=key)


@pytest.mark.parametrize("name", list(FOLDERS))
def test_ids_masks_padding_and_text_equal_transformers(pairs, name):
    ours, theirs = pairs[name]
    specials = [str(t) for t in theirs.all_special_tokens]
    texts = _specials([f"{specials[0]}Hi {specials[-1]} there", f" {specials[-1]}x"])
    for text in texts:
        for add in (True, False):
            assert ours.encode(text, add_special_tokens=add) == theirs.encode(
                text, add_special_tokens=add
            ), (text, add)
    assert ours.padding_side == theirs.padding_side
    if theirs.pad_token is not None:
        for side in ("left", "right"):
            options = {"padding": True, "padding_side": side}
            _same(ours(texts, **options), theirs(texts, return_tensors="np", **options))
    ids = [theirs.encode(text) for text in texts]
    for skip in (False, True):
        for row in ids:
            assert ours.decode(row, skip_special_tokens=skip) == theirs.decode(
                row, skip_special_tokens=skip
            ), (row, skip)
    assert (len(ours), ours.vocab_size) == (len(theirs), theirs.vocab_size)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        assert getattr(ours, key) == getattr(theirs, key), key


def test_whisper_language_must_be_a_code_of_the_vocabulary(pairs):
    files = dict(pairs["whisper-en"][0].files)
    config = json.loads(files["tokenizer_config.json"])
    files["tokenizer_config.json"] = json.dumps({**config, "language": "english"}).encode()
    with pytest.raises(ValueError, match="language='english' is not a language code"):
        Tokenizer(files)
