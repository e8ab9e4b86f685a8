"""js.models.pipeline's encoder-decoder tasks against transformers, on tiny random folders with
tokenizers trained here (nothing downloads):

- ``text2text-generation``, ``summarization``, ``translation`` (T5 with transformers 4's
  ``task_specific_params`` prefixes and generation options, and BART): transformers 5.23 has
  no such pipelines, so the reference follows transformers 4's pipeline steps with
  transformers' tokenizer and ``generate`` (prefix, tokenization, generate, ``batch_decode``
  without special tokens or clean-up); greedy text identical.
- ``automatic-speech-recognition`` (Whisper, 80 mel bins, a 1-second window): transformers
  5.23's pipeline itself; greedy text identical.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from family_support import perturb
from test_bart import CASES as BART_CASES
from test_bart import TINY as BART
from test_pipelines import _byte_bpe, torch, transformers
from test_t5 import SIZES as T5
from test_whisper import RATE, _audio
from test_whisper import TINY as WHISPER
from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

import js.models
from js.models import _generation

TEXTS = ["the quick brown fox jumps", "john lives in paris and likes tea", "hello world"]
T5_TASKS = {  # transformers 4's task_specific_params, as t5-small's config.json has them
    "summarization": {"prefix": "summarize: ", "min_length": 6, "max_length": 12,
                      "no_repeat_ngram_size": 2},
    "translation_en_to_de": {"prefix": "translate English to German: ", "max_length": 10,
                             "no_repeat_ngram_size": 2},
    "translation_en_to_fr": {"prefix": "translate English to French: ", "max_length": 9,
                             "repetition_penalty": 1.5},
}  # fmt: skip
CORPUS = [*TEXTS, "summarize: translate English to German French: my name is sarah"]
WHISPER_SPECIALS = ["<|startoftranscript|>", "<|en|>", "<|fr|>", "<|transcribe|>",
                    "<|translate|>", "<|notimestamps|>"]  # fmt: skip


def _t5_tokenizer():
    """A Unigram with T5's special tokens (<pad> 0, </s> 1, <unk> 2), ``</s>`` appended."""
    backend = Backend(models.Unigram())
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=120, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    backend.train_from_iterator(CORPUS, trainer)
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )


def _bart_tokenizer():
    """A byte-level BPE with BART's special tokens, ``<s> ... </s>`` around each text."""
    backend = _byte_bpe(["<s>", "<pad>", "</s>", "<unk>"])
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        unk_token="<unk>",
    )  # fmt: skip


def _whisper_tokenizer():
    """transformers' WhisperTokenizer on a byte-level BPE trained here, Whisper's special
    tokens after its vocabulary (<|notimestamps|> last: no timestamp tokens)."""
    model = json.loads(_byte_bpe(["<|endoftext|>"]).to_str())["model"]
    merges = [tuple(merge) for merge in model["merges"]]
    return transformers.WhisperTokenizer(
        vocab=model["vocab"], merges=merges, extra_special_tokens=WHISPER_SPECIALS
    )


def _saved(folder, model, *extras, config=None):
    """``folder`` with the model and extras saved, and ``config`` merged into config.json."""
    model.eval().save_pretrained(folder)
    for extra in extras:
        extra.save_pretrained(folder)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **(config or {})}))
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> (transformers model, its folder)."""
    torch.manual_seed(0)
    made = {}
    tokenizer = _t5_tokenizer()
    config = transformers.T5Config(
        vocab_size=len(tokenizer), decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False, **T5,
    )  # fmt: skip
    model = transformers.T5ForConditionalGeneration(config)
    perturb(model)
    folder = tmp_path_factory.mktemp("t5")
    made["t5"] = model, _saved(folder, model, tokenizer, config={"task_specific_params": T5_TASKS})
    tokenizer = _bart_tokenizer()
    keys = {**BART, **BART_CASES["untied"], "vocab_size": len(tokenizer)}
    ids = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2}
    model = transformers.BartForConditionalGeneration(transformers.BartConfig(**keys, **ids))
    perturb(model)
    made["bart"] = model, _saved(tmp_path_factory.mktemp("bart"), model, tokenizer)
    made["whisper"] = _whisper(tmp_path_factory.mktemp("whisper"))
    keys = {"vocab_size": len(tokenizer), "n_embd": 16, "n_layer": 1, "n_head": 2}
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**keys))
    made["gpt2"] = model, _saved(tmp_path_factory.mktemp("gpt2"), model, tokenizer)
    return made


def _whisper(folder):
    """A tiny Whisper whose window is 1 s (100 feature frames, 50 encoder positions)."""
    tokenizer = _whisper_tokenizer()
    ids = tokenizer.convert_tokens_to_ids(WHISPER_SPECIALS)
    special = dict(zip(WHISPER_SPECIALS, ids, strict=True))
    keys = {**WHISPER, "vocab_size": len(tokenizer), "max_source_positions": 50,
            "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0,
            "decoder_start_token_id": special["<|startoftranscript|>"]}  # fmt: skip
    model = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**keys))
    perturb(model)
    generation = {
        "lang_to_id": {"<|en|>": special["<|en|>"], "<|fr|>": special["<|fr|>"]},
        "task_to_id": {"transcribe": special["<|transcribe|>"],
                       "translate": special["<|translate|>"]},
        "no_timestamps_token_id": special["<|notimestamps|>"], "is_multilingual": True,
        "forced_decoder_ids": [[1, None], [2, special["<|transcribe|>"]]],
        "suppress_tokens": [5, 7], "begin_suppress_tokens": [0],
    }  # fmt: skip
    for key, value in generation.items():
        setattr(model.generation_config, key, value)
    model.generation_config._from_model_config = False  # else loading rebuilds it from config
    extractor = transformers.WhisperFeatureExtractor(feature_size=80, chunk_length=1)
    return model, _saved(folder, model, tokenizer, extractor)


def _transformers4(model, folder, task, texts, **options):
    """transformers 4's text2text pipeline steps: the task's prefix and generation options
    (``task_specific_params``), the tokenizer (padding a list), ``generate``, ``decode``
    without special tokens or clean-up."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    tasks = json.loads((folder / "config.json").read_text()).get("task_specific_params") or {}
    if task == "translation":
        task = next((key for key in tasks if key.startswith("translation")), task)
    params = dict(tasks.get(task, {}))
    prefix = params.pop("prefix", "")
    single = isinstance(texts, str)
    batch = tokenizer([prefix + t for t in ([texts] if single else texts)], padding=not single,
                      return_tensors="pt", return_token_type_ids=False)  # fmt: skip
    with torch.no_grad():
        out = model.generate(**batch, **{**params, **options})
    name = {"summarization": "summary", "text2text-generation": "generated"}.get(task)
    key = f"{name or 'translation'}_text"
    texts = tokenizer.batch_decode(
        out, skip_special_tokens=True, clean_up_tokenization_spaces=False
    )
    records = [{key: text} for text in texts]
    copies = options.get("num_return_sequences", 1)
    if single or copies == 1:  # a string's n records; a list's one each
        return records
    return [records[i : i + copies] for i in range(0, len(records), copies)]


_MADE: dict = {}


def _pipeline(folders, name, task):
    """js's pipeline of a task on a folder, made once per module: batches of 4 rows (T5: the
    3 texts in one program) or 2 (BART: batches of 2 and 1)."""
    if (name, task) not in _MADE:
        batch = 2 if name == "bart" else 4
        _MADE[name, task] = js.models.pipeline(task, folders[name][1], batch_size=batch)
    return _MADE[name, task]


@pytest.mark.parametrize(
    "name,task,inputs,options",
    [
        ("t5", "summarization", TEXTS, {}),
        ("t5", "translation", TEXTS, {}),  # T5's first pair: English to German
        ("t5", "translation_en_to_fr", TEXTS, {}),
        pytest.param(  # a batch of 2 and of 1: 9 s in the default run
            "bart", "text2text-generation", TEXTS, {"max_new_tokens": 8}, marks=pytest.mark.slow
        ),
        pytest.param(
            "t5",
            "text2text-generation",
            TEXTS[1],
            {"max_new_tokens": 12, "min_length": 9, "no_repeat_ngram_size": 2},
            marks=pytest.mark.slow,
        ),
        pytest.param("bart", "summarization", TEXTS[0], {"max_length": 6}, marks=pytest.mark.slow),
        ("t5", "summarization", TEXTS, {"num_beams": 2, "num_return_sequences": 2}),
        pytest.param(
            "bart",
            "text2text-generation",
            TEXTS[1],
            {"max_new_tokens": 8, "num_beams": 4, "length_penalty": 0.5, "early_stopping": True},
            marks=pytest.mark.slow,
        ),  # fmt: skip
    ],
)
def test_text_tasks_equal_transformers_4(folders, name, task, inputs, options):
    model, folder = folders[name]
    expected = _transformers4(model, folder, task, inputs, **options)
    got = _pipeline(folders, name, task)(inputs, **options)
    assert got == expected
    flat = [r for row in expected for r in (row if isinstance(row, list) else [row])]
    assert any(next(iter(record.values())) for record in flat), "empty texts prove little"


def test_token_ids_and_options(folders):
    model, folder = folders["t5"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(["summarize: " + TEXTS[0]], return_tensors="pt", return_token_type_ids=False)
    params = {k: v for k, v in T5_TASKS["summarization"].items() if k != "prefix"}
    with torch.no_grad():
        expected = model.generate(**batch, **params).numpy()[0]
    summarize = _pipeline(folders, "t5", "summarization")
    (got,) = summarize(TEXTS[0], return_tensors=True)
    np.testing.assert_array_equal(got["summary_token_ids"], expected)
    with pytest.raises(NotImplementedError, match="src_lang"):
        _pipeline(folders, "t5", "translation")("hello", src_lang="en")
    with pytest.raises(TypeError, match="inputs must be strings"):
        summarize([TEXTS[0], 3])


@pytest.mark.slow  # 5-9 s (BART's first programs); test_pipelines.py counts them in the default run
def test_a_stream_of_sources_compiles_a_few_programs(folders):
    """Six sources of varied lengths, two at a time: one batch shape (2 rows), one source
    bucket (16 tokens) and one new-token bucket, so the programs of the first batch."""
    generate = _pipeline(folders, "bart", "text2text-generation")
    texts = [TEXTS[i % 3][: 5 + 2 * i] for i in range(6)]  # under 16 tokens
    generate(texts[:2], max_new_tokens=8)
    before = _generation.TRACES.copy()
    got = generate(texts, max_new_tokens=8)
    assert len(got) == 6 and _generation.TRACES == before


def _asr_reference(folder, inputs, **options):
    reference = transformers.pipeline("automatic-speech-recognition", model=str(folder))
    return reference(inputs, **options)


def _clips() -> list[np.ndarray]:
    """Two clips within the tiny model's 1 s window: 0.9 s and 0.5 s."""
    first, second = _audio()
    return [first[: int(0.9 * RATE)], second[: RATE // 2]]


def test_speech_recognition_equals_transformers(folders):
    _, folder = folders["whisper"]
    clips = _clips()
    options = {"max_new_tokens": 20, "language": "fr", "num_beams": 1}  # greedy
    expected = _asr_reference(folder, clips, **options)
    recognize = _pipeline(folders, "whisper", "automatic-speech-recognition")
    inputs = [clips[0], {"raw": clips[1], "sampling_rate": RATE}]
    got = recognize(inputs, max_new_tokens=20, num_beams=1, generate_kwargs={"language": "fr"})
    assert got == expected and all(record["text"] for record in expected), (got, expected)


@pytest.mark.slow
def test_speech_recognition_searches_5_beams_by_default(folders):
    """transformers' pipeline default: beam search with 5 beams."""
    _, folder = folders["whisper"]
    reference = transformers.pipeline("automatic-speech-recognition", model=str(folder))
    clip = _clips()[0]
    expected = reference(clip, max_new_tokens=12)
    recognize = _pipeline(folders, "whisper", "automatic-speech-recognition")
    assert recognize(clip, max_new_tokens=12) == expected


def test_speech_recognition_errors(folders):
    recognize = _pipeline(folders, "whisper", "automatic-speech-recognition")
    clip = _clips()[1]
    with pytest.raises(ValueError, match="audio at 8000 Hz, the model takes 16000 Hz"):
        recognize({"raw": clip, "sampling_rate": 8000})
    with pytest.raises(ValueError, match="needs 'raw'"):
        recognize({"audio": clip})
    with pytest.raises(TypeError, match="1-d float NumPy array"):
        recognize("speech.wav")
    with pytest.raises(NotImplementedError, match="long-form transcription"):
        recognize(np.zeros(2 * RATE, np.float32))
    with pytest.raises(NotImplementedError, match="return_timestamps"):
        recognize(clip, return_timestamps=True)
    with pytest.raises(FileNotFoundError, match="preprocessor_config.json"):
        js.models.pipeline("automatic-speech-recognition", folders["t5"][1])
    with pytest.raises(ValueError, match="not an encoder-decoder"):
        js.models.pipeline("summarization", folders["gpt2"][1])


def test_any_language_pair_is_a_task(folders):
    """``translation_xx_to_yy`` names any pair, as transformers 4's ``pipeline`` does (T5's
    parameters for the pair where its config has them, else none)."""
    translate = js.models.pipeline("translation_de_to_en", folders["t5"][1])
    assert translate.task == "translation_de_to_en"
    assert translate.task_params() == {}
    with pytest.raises(KeyError, match="unknown task 'translation_de'"):
        js.models.pipeline("translation_de", folders["t5"][1])
