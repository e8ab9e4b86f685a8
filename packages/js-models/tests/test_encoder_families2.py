"""DistilBERT, MPNet and ModernBERT against transformers 5.23: each class's folder (perturbed
random weights) loads with transformers' outputs on a padded batch, padded positions included,
and the folder js saves holds transformers' file names (tied tensors once) and loads back into
transformers with the same outputs (``encoder_support.loads_both_ways``)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors
from encoder_support import MASK, TOKENS, loads_both_ways, reference

import js
from js.models.distilbert import DistilBertConfig, DistilBertModel
from js.models.modernbert import ModernBertConfig, ModernBertForMaskedLM, ModernBertModel
from js.models.mpnet import MPNetConfig, MPNetModel, relative_position_bucket

pytest.importorskip("torch")
TOL = 1e-5
DISTILBERT = {
    "dim": 32,
    "n_layers": 2,
    "n_heads": 4,
    "hidden_dim": 64,
    "max_position_embeddings": 16,
}
MPNET = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 16,
}
# 3 layers, global attention in the first and third; the sliding layer sees keys at most 2
# tokens away, so the 3-token row's last padded queries see no real token
MODERNBERT = {
    **MPNET,
    "num_hidden_layers": 3,
    "intermediate_size": 48,
    "local_attention": 4,
    "global_attn_every_n_layers": 2,
    **dict.fromkeys(("pad_token_id", "bos_token_id", "cls_token_id"), 0),
    **dict.fromkeys(("eos_token_id", "sep_token_id"), 3),
}
MODERNBERT_BIASED = {
    **MODERNBERT,
    **dict.fromkeys(("attention_bias", "mlp_bias", "norm_bias", "classifier_bias"), True),
    "decoder_bias": False,
    "tie_word_embeddings": False,
    "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0}},
}

CASES = {
    "DistilBertModel": ("DistilBertModel", DISTILBERT),
    "DistilBertForMaskedLM": ("DistilBertForMaskedLM", DISTILBERT),
    "DistilBertForMaskedLM-untied-relu": (
        "DistilBertForMaskedLM",
        {**DISTILBERT, "tie_word_embeddings": False, "activation": "relu"},
    ),
    "DistilBertForSequenceClassification": (
        "DistilBertForSequenceClassification",
        {**DISTILBERT, "num_labels": 3},
    ),
    "DistilBertForTokenClassification": (
        "DistilBertForTokenClassification",
        {**DISTILBERT, "num_labels": 5},
    ),
    "DistilBertForQuestionAnswering": ("DistilBertForQuestionAnswering", DISTILBERT),
    "MPNetModel": ("MPNetModel", MPNET),
    "MPNetForMaskedLM": ("MPNetForMaskedLM", MPNET),
    "MPNetForMaskedLM-untied": ("MPNetForMaskedLM", {**MPNET, "tie_word_embeddings": False}),
    "MPNetForSequenceClassification": ("MPNetForSequenceClassification", MPNET),
    "MPNetForTokenClassification": ("MPNetForTokenClassification", {**MPNET, "num_labels": 5}),
    "MPNetForQuestionAnswering": ("MPNetForQuestionAnswering", MPNET),
    "ModernBertModel": ("ModernBertModel", MODERNBERT),
    "ModernBertForMaskedLM": ("ModernBertForMaskedLM", MODERNBERT),
    "ModernBertForMaskedLM-biased-untied-linear-rope": ("ModernBertForMaskedLM", MODERNBERT_BIASED),
    "ModernBertForSequenceClassification-cls": (
        "ModernBertForSequenceClassification",
        {**MODERNBERT, "num_labels": 3},
    ),
    "ModernBertForSequenceClassification-mean": (
        "ModernBertForSequenceClassification",
        {**MODERNBERT, "classifier_pooling": "mean"},
    ),
    "ModernBertForTokenClassification": (
        "ModernBertForTokenClassification",
        {**MODERNBERT, "num_labels": 5},
    ),
    "ModernBertForQuestionAnswering": ("ModernBertForQuestionAnswering", MODERNBERT),
}


def _file_keys(folder) -> set[str]:
    with safetensors.safe_open(str(folder / "model.safetensors"), "np") as f:
        return set(f.keys())


@pytest.mark.parametrize("case", list(CASES))
def test_loads_both_ways(case, tmp_path):
    hf_class, keys = CASES[case]
    ref = reference(hf_class, keys, tmp_path / "hf")
    there, back = loads_both_ways(ref, tmp_path / "hf", tmp_path / "js")
    assert there < TOL and back < TOL, (there, back)
    assert _file_keys(tmp_path / "js") == _file_keys(tmp_path / "hf")


def test_mpnet_buckets_are_transformers():
    import torch
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    relative = np.arange(-600, 601)  # past max_distance both ways
    expected = MPNetEncoder.relative_position_bucket(torch.tensor(relative)).numpy()
    np.testing.assert_array_equal(relative_position_bucket(relative), expected)


def test_inputs_embeds_and_default_mask_match_transformers(tmp_path):
    import torch

    ref = reference("MPNetModel", MPNET, tmp_path)
    model = MPNetModel.from_pretrained(tmp_path)
    ids = torch.tensor(TOKENS)
    with torch.no_grad():  # inputs_embeds: positions 2..L+1 whatever the tokens
        embeds = ref.embeddings.word_embeddings(ids)
        expected = ref(inputs_embeds=embeds).last_hidden_state.numpy()
    hidden, pooled = model(inputs_embeds=jnp.asarray(embeds.numpy()))
    np.testing.assert_allclose(hidden, expected, atol=TOL * np.abs(expected).max())
    assert pooled.shape == (3, 32)


def test_modernbert_config_from_older_keys():
    from transformers import ModernBertConfig as HFConfig

    older = {"global_rope_theta": 1e5, "local_rope_theta": 1e3, "global_attn_every_n_layers": 3}
    config = ModernBertConfig(num_hidden_layers=4, **older)
    expected = HFConfig(num_hidden_layers=4, **older)
    assert config.layer_types == expected.layer_types
    assert config.rope_parameters == expected.rope_parameters
    assert "global_rope_theta" not in config.to_dict()  # written as rope_parameters


def test_distilbert_sinusoidal_positions():
    import torch
    from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings

    config = DistilBertConfig(vocab_size=20, sinusoidal_pos_embds=True, **DISTILBERT)
    table = DistilBertModel(config, rngs=js.Rngs(params=0)).embeddings.position_embeddings
    expected = create_sinusoidal_embeddings(16, 32, torch.empty(16, 32)).numpy()
    np.testing.assert_allclose(table.weight.value, expected, atol=1e-6)
    assert config.hidden_size == 32 and config.to_dict()["hidden_dim"] == 64  # aliases


def test_modernbert_tied_decoder_and_no_pooler():
    config = ModernBertConfig(vocab_size=20, **MODERNBERT)
    model = ModernBertForMaskedLM(config, rngs=js.Rngs(params=0))
    assert model.decoder.weight is model.model.embeddings.tok_embeddings.weight
    assert model.model.pooler is None and model.model.layers[0].attn_norm is not None
    assert [layer.attn.attention_type for layer in model.model.layers] == [
        "full_attention",
        "sliding_attention",
        "full_attention",
    ]


def test_refusals():
    ids, mask = jnp.asarray(TOKENS), jnp.asarray(MASK)
    mpnet = MPNetModel(MPNetConfig(vocab_size=100, **MPNET), rngs=js.Rngs(params=0))
    with pytest.raises(ValueError, match="MPNetModel: token_type_ids were given, but the model"):
        mpnet(ids, mask, jnp.zeros_like(ids))
    with pytest.raises(ValueError, match="MPNetModel: sequence length 15 exceeds max_position"):
        mpnet(jnp.ones((1, 15), jnp.int32))  # positions 2..16 of a 16-row table
    modern = ModernBertModel(ModernBertConfig(vocab_size=100, **MODERNBERT), rngs=js.Rngs(params=0))
    with pytest.raises(NotImplementedError, match="ModernBertModel: position_ids are not"):
        modern(ids, mask, position_ids=jnp.arange(8)[None])
    with pytest.raises(ValueError, match="ModernBertModel: layer_types must name 3 layers"):
        ModernBertConfig(**MODERNBERT, layer_types=["full_attention", "global"]).validate()
    with pytest.raises(ValueError, match="ModernBertModel: classifier_pooling must be 'cls' or"):
        ModernBertConfig(**MODERNBERT, classifier_pooling="max").validate()
