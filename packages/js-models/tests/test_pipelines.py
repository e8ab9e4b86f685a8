"""js.models.pipeline against transformers' pipeline on the same folders: tiny random BERT heads,
a ViT classifier and a GPT-2, saved by transformers beside a tokenizer trained here with the
``tokenizers`` library (wrapped in transformers' PreTrainedTokenizerFast). Labels and structure
equal, scores within 1e-4, greedy text identical. Nothing downloads."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from llama_support import transformers_without_torchvision

import js.models
from js.models import pipelines

pytest.importorskip("tokenizers")
torch = pytest.importorskip("torch")
with transformers_without_torchvision() as transformers:
    transformers.BertForMaskedLM  # noqa: B018  (lazy imports, torchvision hidden)
    transformers.ViTForImageClassification  # noqa: B018
    transformers.CLIPModel  # noqa: B018
    transformers.pipelines  # noqa: B018
from tokenizers import Tokenizer as Backend  # noqa: E402
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

CORPUS = [
    "the quick brown fox jumps over the lazy dog in paris",
    "hello world, how are you today? john lives in london and likes tea",
    "my name is sarah and i work at the bank near the river",
]
TEXTS = ["the quick brown fox", "john lives in paris", "hello world, how are you today?"]
NER = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
BERT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64,
        "initializer_range": 0.3}  # fmt: skip
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _wordpiece() -> Backend:
    backend = Backend(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    backend.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=120, special_tokens=specials)
    )
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return backend


def _byte_bpe(specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>")) -> Backend:
    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = list(specials)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=alphabet
    )
    backend.train_from_iterator(CORPUS, trainer)
    return backend


def _save(path, model, tokenizer=None, processor=None):
    model.eval().save_pretrained(path)
    for extra in (tokenizer, processor):
        if extra is not None:
            extra.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """task -> a folder transformers wrote."""
    torch.manual_seed(0)
    bert = transformers.PreTrainedTokenizerFast(
        tokenizer_object=_wordpiece(), unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
        cls_token="[CLS]", mask_token="[MASK]", clean_up_tokenization_spaces=True,
    )  # fmt: skip
    gpt = transformers.PreTrainedTokenizerFast(
        tokenizer_object=_byte_bpe(), eos_token="<|endoftext|>", chat_template=CHATML
    )
    labels = {"id2label": dict(enumerate(["neg", "neutral", "pos"]))}
    bert_config = transformers.BertConfig
    made = {
        "text-classification": transformers.BertForSequenceClassification(
            bert_config(vocab_size=len(bert), **BERT, **labels)
        ),
        "fill-mask": transformers.BertForMaskedLM(bert_config(vocab_size=len(bert), **BERT)),
        "token-classification": transformers.BertForTokenClassification(
            bert_config(vocab_size=len(bert), **BERT, id2label=dict(enumerate(NER)))
        ),
    }
    paths = {task: _save(tmp_path_factory.mktemp(task), m, bert) for task, m in made.items()}
    vit = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        image_size=16, patch_size=4, id2label=dict(enumerate("abcdefg")), initializer_range=0.3,
    )  # fmt: skip
    processor = transformers.ViTImageProcessor(size={"height": 16, "width": 16})
    model = transformers.ViTForImageClassification(vit)
    paths["image-classification"] = _save(tmp_path_factory.mktemp("vit"), model, None, processor)
    gpt2 = transformers.GPT2Config(
        vocab_size=len(gpt), n_embd=32, n_layer=1, n_head=2, n_positions=128,
        bos_token_id=0, eos_token_id=0, initializer_range=0.3,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(gpt2)
    paths["text-generation"] = _save(tmp_path_factory.mktemp("gpt2"), model, gpt)
    paths["zero-shot-image-classification"] = _clip(tmp_path_factory.mktemp("clip"))
    return paths


def _clip(folder):
    """A tiny CLIP: a byte-level BPE that adds <|startoftext|> and <|endoftext|> (the text's
    pooled position), 16x16 images."""
    backend = _byte_bpe(["<|startoftext|>", "<|endoftext|>", "<|pad|>"])
    backend.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[("<|startoftext|>", 0), ("<|endoftext|>", 1)],
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
        pad_token="<|pad|>",
    )  # fmt: skip
    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
             "num_attention_heads": 2}  # fmt: skip
    config = transformers.CLIPConfig(
        text_config={**tower, "vocab_size": len(tokenizer), "max_position_embeddings": 32,
                     "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2},
        vision_config={**tower, "image_size": 16, "patch_size": 4},
        projection_dim=16, initializer_factor=5.0,
    )  # fmt: skip
    processor = transformers.CLIPImageProcessor(
        size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16}
    )
    return _save(folder, transformers.CLIPModel(config), tokenizer, processor)


def _same(ours, theirs, where="result"):
    """Equal structure, labels and tokens; floats within 1e-4."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs), (where, ours, theirs)
        for key in theirs:
            _same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), (where, ours, theirs)
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _same(a, b, f"{where}[{i}]")
    elif isinstance(theirs, (float, np.floating)):
        assert abs(float(ours) - float(theirs)) < 1e-4, (where, ours, theirs)
    else:
        assert ours == theirs, (where, ours, theirs)


_MADE: dict = {}


def _pipelines(folders, task):
    """(js's, transformers') pipelines of a task, made once for the module."""
    if task not in _MADE:
        folder = folders[task]
        _MADE[task] = (
            js.models.pipeline(task, folder),
            transformers.pipeline(task, model=str(folder)),
        )
    return _MADE[task]


def _both(folders, task, inputs, **options):
    ours, theirs = (made(inputs, **options) for made in _pipelines(folders, task))
    _same(ours, theirs)
    return ours


@pytest.mark.parametrize(
    "task,inputs,options",
    [
        ("text-classification", TEXTS[0], {}),
        ("text-classification", TEXTS, {"top_k": None}),
        pytest.param(
            "text-classification",
            TEXTS[1],
            {"top_k": 2, "function_to_apply": "sigmoid"},
            marks=pytest.mark.slow,
        ),
        ("fill-mask", "the quick [MASK] fox", {"top_k": 3}),
        ("fill-mask", ["hello [MASK], how are [MASK]", "john [MASK] in paris"], {}),
        ("token-classification", TEXTS, {}),
        ("token-classification", TEXTS, {"aggregation_strategy": "simple", "ignore_labels": []}),
        ("text-generation", "hello world", {"max_new_tokens": 6, "do_sample": False}),
        (
            "text-generation",
            [{"role": "user", "content": "hello"}],
            {"max_new_tokens": 4, "do_sample": False},
        ),
        pytest.param(
            "text-generation",
            [[{"role": "user", "content": "how are you?"}], [{"role": "user", "content": "hi"}]],
            {"max_new_tokens": 5, "do_sample": False, "return_full_text": False},
            marks=pytest.mark.slow,
        ),
    ],
)
def test_text_pipelines_equal_transformers(folders, task, inputs, options):
    _both(folders, task, inputs, **options)


def test_features_similarity_and_images_equal_transformers(folders, tmp_path):
    folder = folders["fill-mask"]
    ours = js.models.pipeline("feature-extraction", folder)(TEXTS)
    theirs = transformers.pipeline("feature-extraction", model=str(folder))(TEXTS)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4)
    folder = shutil.copytree(folder, tmp_path / "st")  # a sentence-transformers folder
    (folder / "1_Pooling").mkdir()
    pooling = {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    kinds = {"": "Transformer", "1_Pooling": "Pooling"}
    rows = [{"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
            for i, (path, kind) in enumerate(kinds.items())]  # fmt: skip
    (folder / "modules.json").write_text(json.dumps(rows))
    similar = js.models.pipeline("sentence-similarity", folder)
    scores = similar({"source_sentence": TEXTS[0], "sentences": TEXTS})
    means = np.stack([np.mean(t[0], axis=0) for t in theirs])  # mean pooling of transformers'
    means /= np.linalg.norm(means, axis=-1, keepdims=True)
    np.testing.assert_allclose(scores, means @ means[0], atol=1e-4)
    PIL = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(0)
    images = [
        PIL.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8)) for h, w in [(20, 17), (9, 31)]
    ]
    _both(folders, "image-classification", images, top_k=3)
    labels = {"candidate_labels": ["a dog", "a quick fox", "the world"]}
    _both(folders, "zero-shot-image-classification", images, **labels)
    _both(folders, "zero-shot-image-classification", images[0], **labels, hypothesis_template="{}")


def test_a_stream_of_mixed_lengths_compiles_a_few_programs(folders):
    classify = js.models.pipeline(
        "text-classification", folders["text-classification"], batch_size=4
    )
    words = " ".join(CORPUS).split()
    texts = [" ".join(words[: 1 + (7 * i) % 29]) for i in range(13)]
    before = sum(pipelines.TRACES.values())
    first = classify(texts, top_k=None)
    compiled = sum(pipelines.TRACES.values()) - before
    assert compiled <= 6  # token buckets 8, 16, 32 times row buckets 4 and 1 (the last batch)
    assert classify(texts, top_k=None) == first
    assert sum(pipelines.TRACES.values()) - before == compiled  # nothing new
    one = [classify(text, top_k=None) for text in texts[:3]]
    _same(one, first[:3])  # other shapes: equal to float32 rounding


def test_pipeline_errors(folders):
    with pytest.raises(KeyError, match="unknown task 'summarise'"):
        js.models.pipeline("summarise", folders["fill-mask"])
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        js.models.pipeline("fill-mask", folders["fill-mask"], batch_size=0)
    with pytest.raises(FileNotFoundError, match="has no tokenizer.json, which the task reads"):
        js.models.pipeline("fill-mask", folders["image-classification"])
    fill = _pipelines(folders, "fill-mask")[0]
    with pytest.raises(ValueError, match=r"no '\[MASK\]' in the text"):
        fill("no mask here")
    ner = _pipelines(folders, "token-classification")[0]
    with pytest.raises(NotImplementedError, match="aggregation_strategy='max'"):
        ner("john", aggregation_strategy="max")
    classify = _pipelines(folders, "text-classification")[0]
    with pytest.raises(ValueError, match="function_to_apply='tanh'"):
        classify("john", function_to_apply="tanh")


@pytest.mark.slow
def test_text_generation_samples_by_default_with_a_seed(folders):
    generate = _pipelines(folders, "text-generation")[0]
    first = generate("hello", max_new_tokens=8, seed=3)
    assert first == generate("hello", max_new_tokens=8, seed=3)
    assert first[0]["generated_text"].startswith("hello")
