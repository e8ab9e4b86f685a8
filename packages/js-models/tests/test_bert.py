"""BERT against transformers 5.23: folders saved by transformers load and give its numbers
(padded batch, token types, pooled output, classifier logits); folders js saves load back
into transformers with the same numbers; a head model's folder loads into the base model."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
from bertvit_support import (
    BERT_TINY,
    IDS,
    MASK,
    TYPES,
    bert_outputs,
    bert_reference,
    rel,
    transformers,
)

import js
import js.models
from js.models.bert import BertConfig, BertForSequenceClassification, BertModel

pytest.importorskip("torch")
TOL = 1e-5
ARGS = {"attention_mask": MASK, "token_type_ids": TYPES}


def _jnp(args: dict) -> dict:
    return {key: jnp.asarray(value) for key, value in args.items()}


@pytest.fixture(scope="module")
def classifier_folder(tmp_path_factory):
    ref = bert_reference(id2label={0: "neg", 1: "neutral", 2: "pos"})
    folder = tmp_path_factory.mktemp("bert_cls")
    ref.save_pretrained(str(folder))
    return ref, folder


def test_classifier_folder_matches_transformers(classifier_folder):
    ref, folder = classifier_folder
    model = js.models.from_pretrained(folder)
    assert type(model) is BertForSequenceClassification and not model.training
    assert model.config.num_labels == 3 and model.config.id2label[2] == "pos"
    logits = model(jnp.asarray(IDS), **_jnp(ARGS))
    assert logits.shape == (2, 3)
    assert rel(logits, bert_outputs(ref).logits) < TOL
    # the padded row's valid positions: the same numbers as transformers
    hidden, pooled = model.bert(jnp.asarray(IDS), **_jnp(ARGS))
    ref_base = bert_outputs(ref.bert)
    assert rel(hidden, ref_base.last_hidden_state, MASK.astype(bool)) < TOL
    assert rel(pooled, ref_base.pooler_output) < TOL


def test_base_model_hidden_state_and_pooled_output(tmp_path):
    ref = bert_reference("BertModel", hidden_act="gelu", layer_norm_eps=1e-7)
    ref.save_pretrained(str(tmp_path))
    model = BertModel.from_pretrained(tmp_path)
    out = bert_outputs(ref)
    hidden, pooled = model(jnp.asarray(IDS), **_jnp(ARGS))
    assert rel(hidden, out.last_hidden_state, MASK.astype(bool)) < TOL
    assert rel(pooled, out.pooler_output) < TOL
    # a row of padding only: zeros from attention, as transformers' default (sdpa) attention
    empty = MASK.copy()
    empty[1] = 0
    hidden, _ = model(jnp.asarray(IDS), **_jnp({**ARGS, "attention_mask": empty}))
    assert rel(hidden, bert_outputs(ref, mask=empty).last_hidden_state) < TOL
    # defaults: no mask (every token attends), token types all 0, positions 0..L-1
    out = bert_outputs(ref, mask=None, types=None)
    hidden, pooled = model(jnp.asarray(IDS))
    assert rel(hidden, out.last_hidden_state) < TOL and rel(pooled, out.pooler_output) < TOL
    # explicit position_ids, as transformers reads them
    import torch

    positions = np.array([[3, 4, 5, 6, 7, 8, 9]])
    with torch.no_grad():
        out = ref(input_ids=torch.tensor(IDS), position_ids=torch.tensor(positions))
    hidden, _ = model(jnp.asarray(IDS), position_ids=jnp.asarray(positions))
    assert rel(hidden, out.last_hidden_state) < TOL


def test_js_folder_loads_into_transformers(tmp_path):
    tf = transformers()
    config = BertConfig(**BERT_TINY, num_labels=4, classifier_dropout=0.2)
    model = BertForSequenceClassification(config, rngs=js.Rngs(params=1))
    state = model.state_dict()
    noise = np.random.default_rng(1)
    model.load_state_dict(
        {k: v + noise.normal(size=v.shape).astype(v.dtype) * 0.3 for k, v in state.items()}
    )
    model.eval()
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architectures"] == ["BertForSequenceClassification"]
    ref, info = tf.BertForSequenceClassification.from_pretrained(
        str(tmp_path), output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert ref.config.num_labels == 4 and ref.config.classifier_dropout == 0.2
    logits = model(jnp.asarray(IDS), **_jnp(ARGS))
    assert rel(logits, bert_outputs(ref.eval()).logits) < TOL


def test_base_model_from_a_classifier_folder(classifier_folder):
    ref, folder = classifier_folder
    model = BertModel.from_pretrained(folder)
    info = js.models.loading_info(model)
    assert info.ignored_keys == ["classifier.bias", "classifier.weight"]
    assert not info.missing_keys and not info.unexpected_keys
    hidden, pooled = model(jnp.asarray(IDS), **_jnp(ARGS))
    out = bert_outputs(ref.bert)
    assert rel(hidden, out.last_hidden_state, MASK.astype(bool)) < TOL
    assert rel(pooled, out.pooler_output) < TOL


def test_base_model_folder_into_a_classifier_needs_the_head(tmp_path):
    ref = bert_reference("BertModel")
    ref.save_pretrained(str(tmp_path))
    with pytest.raises(ValueError, match="classifier"):
        BertForSequenceClassification.from_pretrained(tmp_path)
    model = BertForSequenceClassification.from_pretrained(tmp_path, strict=False)
    assert sorted(js.models.loading_info(model).missing_keys) == [
        "classifier.bias",
        "classifier.weight",
    ]
    hidden, _ = model.bert(jnp.asarray(IDS), **_jnp(ARGS))
    assert rel(hidden, bert_outputs(ref).last_hidden_state, MASK.astype(bool)) < TOL


def test_legacy_names_and_position_ids_load(classifier_folder, tmp_path):
    """TensorFlow-era ``LayerNorm.gamma/beta`` and the ``position_ids`` buffer of files from
    transformers < 4.31, which transformers 5.23 still renames and ignores."""
    ref, folder = classifier_folder
    arrays = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    old = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        ): v
        for k, v in arrays.items()
    }
    old["bert.embeddings.position_ids"] = np.arange(16)[None]
    safetensors.numpy.save_file(old, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    model = js.models.from_pretrained(tmp_path)
    assert js.models.loading_info(model).ignored_keys == ["bert.embeddings.position_ids"]
    assert rel(model(jnp.asarray(IDS), **_jnp(ARGS)), bert_outputs(ref).logits) < TOL


def test_module_names_are_the_files_keys(classifier_folder):
    ref, _ = classifier_folder
    model = BertForSequenceClassification(
        BertConfig(**BERT_TINY, num_labels=3), rngs=js.Rngs(params=0)
    )
    assert sorted(model.state_dict()) == sorted(ref.state_dict())
    # non-persistent buffers, as in transformers: not in the state dict or the file
    buffers = dict(model.named_buffers())
    assert buffers["bert.embeddings.position_ids"].value.shape == (1, 16)
    base = BertModel(BertConfig(**BERT_TINY), add_pooling_layer=False, rngs=js.Rngs(params=0))
    assert base.pooler is None and not any("pooler" in k for k in base.state_dict())
    assert base.eval()(jnp.asarray(IDS))[1] is None


def test_training_mode_dropout_needs_rngs(classifier_folder):
    _, folder = classifier_folder
    model = js.models.from_pretrained(folder)
    eval_logits = model(jnp.asarray(IDS))
    model.train()
    with pytest.raises(ValueError, match="rngs"):
        model(jnp.asarray(IDS))
    train_logits = model(jnp.asarray(IDS), rngs=js.Rngs(dropout=0))
    assert not np.allclose(train_logits, eval_logits)


def test_labels_follow_transformers():
    assert BertConfig().num_labels == 2
    assert BertConfig(num_labels=5).id2label[4] == "LABEL_4"
    config = BertConfig.from_dict({"id2label": {"0": "a", "1": "b", "2": "c"}, "num_labels": 7})
    assert config.num_labels == 3 and config.id2label == {0: "a", 1: "b", 2: "c"}
    config.num_labels = 4
    assert config.label2id == {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2, "LABEL_3": 3}
    with pytest.raises(ValueError, match="num_labels must be a non-negative int"):
        BertConfig(num_labels=-1)


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        ({"is_decoder": True}, NotImplementedError, "is_decoder=True"),
        ({"add_cross_attention": True}, NotImplementedError, "add_cross_attention=True"),
        ({"position_embedding_type": "relative_key"}, NotImplementedError, "relative_key"),
        ({"num_attention_heads": 5}, ValueError, "not a multiple of num_attention_heads=5"),
        ({"hidden_act": "mish"}, ValueError, "hidden_act='mish' is not an activation"),
    ],
)
def test_unsupported_configs_are_refused(overrides, error, match):
    with pytest.raises(error, match=match):
        BertModel(BertConfig(**{**BERT_TINY, **overrides}), rngs=js.Rngs(params=0))


def test_bad_inputs_are_refused():
    model = BertModel(BertConfig(**BERT_TINY), rngs=js.Rngs(params=0)).eval()
    ids = jnp.asarray(IDS)
    with pytest.raises(ValueError, match=r"attention_mask must be \[batch, seq_len\] = \[2, 7\]"):
        model(ids, attention_mask=jnp.ones((2, 6)))
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        model(ids, inputs_embeds=jnp.ones((2, 7, 32)))
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        model()
    with pytest.raises(
        ValueError, match=r"input_ids must be integer token ids \[B, L\].*got shape \[7\]"
    ):
        model(ids[0])
    with pytest.raises(ValueError, match="exceeds max_position_embeddings=16"):
        model(jnp.ones((1, 17), jnp.int32))
