"""SentenceTransformer against sentence-transformers 6.3: folders it saves (a tiny perturbed BERT
with Pooling, Dense and Normalize modules) give its embeddings for the same token ids and the
same texts (a WordPiece tokenizer trained here), and the folders js saves load back into it with
the same embeddings. Nothing downloads."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
import safetensors.numpy
from family_support import perturb, relative_error
from llama_support import transformers_without_torchvision

import js
from js.models import sentence_transformers
from js.models.sentence_transformers import Dense, Pooling, SentenceTransformer, TextTokenizer

torch = pytest.importorskip("torch")
with transformers_without_torchvision() as transformers:
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.base import modules as st_modules
    from sentence_transformers.sentence_transformer.modules import Pooling as StPooling

CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world", "sentence embeddings"]
TEXTS = ["Hello world", "the quick brown fox jumps over the lazy dog twice", "fox", "lazy dogs"]
# A right-padded batch with two segments: ids, mask and token types [3, 7].
IDS = np.array([[2, 40, 51, 63, 3, 0, 0], [2, 12, 33, 44, 55, 66, 3], [2, 9, 3, 0, 0, 0, 0]])
FEATURES = {
    "input_ids": IDS,
    "attention_mask": (IDS != 0).astype(np.int64),
    "token_type_ids": np.array(
        [[0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0]]
    ),
}
# Each case: pooling mode(s), Dense activation (None: no Dense), Normalize, similarity_fn_name
# and whether the Pooling config is written in the pooling_mode_* flags of older releases.
CASES = {
    "mean": ("mean", None, True, None, False),
    "cls": ("cls", torch.nn.Tanh(), False, None, False),
    "max": ("max", None, False, None, False),
    "lasttoken": ("lasttoken", None, False, None, True),
    "sqrt_weighted": (
        ("mean_sqrt_len_tokens", "weightedmean"),
        torch.nn.GELU(),
        False,
        "dot",
        False,
    ),
}


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A transformers BERT folder (perturbed, with a WordPiece tokenizer.json trained here)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    text = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    text.normalizer = normalizers.BertNormalizer(lowercase=False)  # do_lower_case matters
    text.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    text.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=100, special_tokens=special)
    )
    ends = [(name, text.token_to_id(name)) for name in ("[CLS]", "[SEP]")]
    text.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=ends
    )
    folder = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=100,  # the tokenizer's ids and IDS are below it
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    model = transformers.BertModel(config).eval()
    perturb(model)
    model.save_pretrained(folder)
    transformers.BertTokenizerFast(tokenizer_object=text).save_pretrained(folder)
    return folder


def _reference(encoder, folder, case):
    """sentence-transformers' model of ``case`` on ``encoder``, saved to ``folder``."""
    mode, activation, normalize, similarity, legacy = CASES[case]
    pooling = StPooling(32, pooling_mode=mode)
    modules = [st_modules.Transformer(str(encoder)), pooling]
    if activation is not None:
        width = pooling.get_embedding_dimension()
        modules.append(st_modules.Dense(width, 16, activation_function=activation))
        perturb(modules[-1])
    if normalize:
        modules.append(st_modules.Normalize())
    model = st.SentenceTransformer(modules=modules, similarity_fn_name=similarity, device="cpu")
    model.save(str(folder))
    if legacy:
        flags = {f"pooling_mode_{name}": name == "lasttoken" for name in ("cls_token", "lasttoken")}
        (folder / "1_Pooling" / "config.json").write_text(
            json.dumps({"word_embedding_dimension": 32, **flags})
        )
    return st.SentenceTransformer(str(folder), device="cpu")


def _theirs(model, features=FEATURES) -> np.ndarray:
    with torch.no_grad():
        out = model({key: torch.tensor(value) for key, value in features.items()})
    return out["sentence_embedding"].numpy()


def _check(ours, theirs):
    cosine = (
        (ours * theirs).sum(-1) / np.linalg.norm(ours, axis=-1) / np.linalg.norm(theirs, axis=-1)
    )
    assert cosine.min() >= 0.99999 and relative_error(ours, theirs) < 1e-4


@pytest.mark.parametrize("case", list(CASES))
def test_folder_loads_both_ways(case, encoder, tmp_path):
    ref = _reference(encoder, tmp_path / "st", case)
    model = SentenceTransformer(tmp_path / "st")
    ours = model.encode(FEATURES)
    assert ours.shape == (3, 16 if CASES[case][1] is not None else 32 * len(model[1].modes))
    _check(ours, _theirs(ref))
    assert model.similarity_fn_name == ref.similarity_fn_name
    model.save_pretrained(tmp_path / "js")
    back = st.SentenceTransformer(str(tmp_path / "js"), device="cpu")
    _check(_theirs(back), ours)
    assert back.similarity_fn_name == model.similarity_fn_name


def test_texts_prompts_and_similarity(encoder, tmp_path):
    """Older releases' sentence_bert_config.json (max_seq_length, do_lower_case), a prompt left
    out of the mean (include_prompt false), and the four similarity functions."""
    model = st.SentenceTransformer(
        modules=[st_modules.Transformer(str(encoder)), StPooling(32, include_prompt=False)],
        prompts={"query": "find: "},
    )
    model.save(str(tmp_path))
    (tmp_path / "sentence_bert_config.json").write_text(
        '{"max_seq_length": 8, "do_lower_case": true}'
    )
    ref = st.SentenceTransformer(str(tmp_path), device="cpu")
    ours = SentenceTransformer.from_pretrained(tmp_path)
    assert ours[0].max_seq_length == 8
    ids = ref.preprocess(TEXTS)["input_ids"].numpy()
    assert ids.shape[1] == 8 and (ours[0].tokenizer(TEXTS)["input_ids"] == ids).all()
    prompted = {"prompt_name": "query", "normalize_embeddings": True}
    _check(ours.encode(TEXTS, **prompted), ref.encode(TEXTS, **prompted))
    theirs = ref.encode(TEXTS, batch_size=3)
    _check(ours.encode(TEXTS), theirs)
    _check(ours.encode(TEXTS[::-1] + TEXTS, batch_size=4), np.concatenate([theirs[::-1], theirs]))
    a, b = ours.encode(TEXTS[:2]), ours.encode(TEXTS[1:])
    for name in ("cosine", "dot", "euclidean", "manhattan"):
        ours.similarity_fn_name = ref.similarity_fn_name = name
        assert relative_error(ours.similarity(a, b), ref.similarity(a, b).numpy()) < 1e-5


def test_a_folder_without_the_pooler(encoder, tmp_path):
    """transformers builds a pooler the folder may lack and Pooling never reads; any other
    missing tensor is an error."""
    ref = _reference(encoder, tmp_path, "max")
    weights = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    kept = {key: value for key, value in weights.items() if not key.startswith("pooler.")}
    safetensors.numpy.save_file(kept, tmp_path / "model.safetensors")
    _check(SentenceTransformer(tmp_path).encode(FEATURES), _theirs(ref))
    del kept["encoder.layer.0.output.dense.bias"]
    safetensors.numpy.save_file(kept, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing \['encoder.layer.0.output.dense.bias'\]"):
        SentenceTransformer(tmp_path)


@pytest.fixture(scope="module")
def saved(encoder, tmp_path_factory):
    """A saved "cls" case folder (Transformer, Pooling, Dense) and js's model of it."""
    folder = tmp_path_factory.mktemp("st_cls")
    _reference(encoder, folder, "cls")
    return folder, SentenceTransformer(folder)


def _edit_modules(folder, edit):
    rows = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps(edit(rows)))


@pytest.mark.parametrize(
    "edit, error, match",
    [
        (lambda folder: (folder / "modules.json").unlink(), FileNotFoundError, "no modules.json"),
        (lambda folder: (folder / "modules.json").write_text("{"), ValueError, "not valid JSON"),
        (
            lambda folder: _edit_modules(
                folder, lambda rows: [*rows, {**rows[1], "type": "x.CNN"}]
            ),
            NotImplementedError,
            "lists a 'x.CNN' module",
        ),
        (
            lambda folder: _edit_modules(folder, lambda rows: [{**rows[0], "path": "../up"}]),
            ValueError,
            "outside it",
        ),
        (lambda folder: _edit_modules(folder, lambda rows: rows[1:]), ValueError, "must start"),
    ],
    ids=["no_modules_json", "bad_json", "unknown_module", "path_outside", "pooling_first"],
)
def test_folder_errors(saved, tmp_path, edit, error, match):
    shutil.copytree(saved[0], tmp_path, dirs_exist_ok=True)
    edit(tmp_path)
    with pytest.raises(error, match=match):
        SentenceTransformer(tmp_path)


def test_module_errors(saved, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"pooling modes \['sum'\]"):
        Pooling({"pooling_mode": ["mean", "sum"]})
    shutil.copytree(saved[0] / "2_Dense", tmp_path / "dense")

    def dense(activation):
        config = {"in_features": 2, "out_features": 2, "activation_function": activation}
        return Dense(config, rngs=js.Rngs(params=0)).activation_function

    with pytest.raises(NotImplementedError, match="Softplus"):
        dense("torch.nn.modules.activation.Softplus")
    assert type(dense("custom.Act")).__name__ == "Tanh"  # as sentence-transformers
    (tmp_path / "dense" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        Dense.load(tmp_path / "dense")
    files = saved[1][0].tokenizer.files
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        TextTokenizer({}, 8, False)(["fox"])
    unpadded = {"tokenizer.json": files["tokenizer.json"]}
    with pytest.raises(ValueError, match="no pad_token"):
        TextTokenizer(unpadded, None, False)(["fox", "lazy dog"])
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match="pip install tokenizers"):
        TextTokenizer(files, 8, False)(["fox"])


def test_encode_errors(saved):
    model = saved[1]
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        model.encode(FEATURES, batch_size=0)
    with pytest.raises(ValueError, match=r"input_ids of shape \[7\]"):
        model.encode(IDS[0])
    with pytest.raises(ValueError, match=r"got keys \['input_ids', 'labels'\]"):
        model.encode({"input_ids": IDS, "labels": IDS})
    with pytest.raises(ValueError, match="must have input_ids' shape"):
        model.encode({"input_ids": IDS, "attention_mask": IDS[:, :3]})
    with pytest.raises(ValueError, match="inputs are token ids"):
        model.encode(FEATURES, prompt="query: ")
    with pytest.raises(ValueError, match="prompt_name 'web' is not one"):
        model.encode(TEXTS, prompt_name="web")
    with pytest.raises(ValueError, match="similarity_fn_name must be one of"):
        model.similarity_fn_name = "maxsim"


def test_encode_compiles_once_per_batch_shape(saved):
    """Each batch is padded (masked) to a bucket of rows and tokens and runs that bucket's
    compiled program (the padding changes no embedding); the same bucket again traces
    nothing."""
    model = saved[1]
    ours = model.encode(FEATURES)  # 3 rows of 7 tokens: the bucket of 4 rows, 8 tokens
    traced = sentence_transformers.TRACES["encode"]
    cut = model.encode({key: value[:, :5] for key, value in FEATURES.items()})  # also (4, 8)
    np.testing.assert_array_equal(cut[[0, 2]], ours[[0, 2]])  # rows 0 and 2 fit in 5 tokens
    assert sentence_transformers.TRACES["encode"] == traced
    wide = {key: np.tile(value, (2, 2))[:, :12] for key, value in FEATURES.items()}  # [6, 12]
    first = model.encode(wide)  # the bucket of 8 rows, 16 tokens
    np.testing.assert_array_equal(model.encode(wide, batch_size=8), first)
    assert sentence_transformers.TRACES["encode"] == traced + 1
