"""BERT's heads, RoBERTa, XLM-RoBERTa and ELECTRA against transformers 5.23: each class's
folder (perturbed random weights) loads with transformers' outputs on a padded batch, and the
folder js saves holds transformers' file names (tied tensors once) and loads back into
transformers with the same outputs (``encoder_support.loads_both_ways``)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors
from encoder_support import MASK, TOKENS, loads_both_ways, reference

import js
import js.models
from js.models.bert import BertConfig, BertForQuestionAnswering
from js.models.electra import ElectraConfig, ElectraModel
from js.models.roberta import RobertaConfig, RobertaModel

pytest.importorskip("torch")
TOL = 1e-5
TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 16,
}
ROBERTA = {**TINY, "type_vocab_size": 1}  # RoBERTa checkpoints have one token type
ELECTRA = {**TINY, "embedding_size": 16}  # embeddings_project: 16 -> 32
UNPROJECTED = {**TINY, "embedding_size": 32}  # no embeddings_project

CASES = {
    "BertForMaskedLM": ("BertForMaskedLM", TINY),
    "BertForMaskedLM-untied": ("BertForMaskedLM", {**TINY, "tie_word_embeddings": False}),
    "BertForTokenClassification": ("BertForTokenClassification", {**TINY, "num_labels": 5}),
    "BertForQuestionAnswering": ("BertForQuestionAnswering", TINY),
    "RobertaModel": ("RobertaModel", ROBERTA),
    "RobertaModel-token-types": ("RobertaModel", TINY),
    "RobertaForMaskedLM": ("RobertaForMaskedLM", ROBERTA),
    "RobertaForSequenceClassification": ("RobertaForSequenceClassification", ROBERTA),
    "RobertaForTokenClassification": ("RobertaForTokenClassification", ROBERTA),
    "RobertaForQuestionAnswering": ("RobertaForQuestionAnswering", ROBERTA),
    "XLMRobertaModel": ("XLMRobertaModel", ROBERTA),
    "XLMRobertaForMaskedLM": ("XLMRobertaForMaskedLM", ROBERTA),
    "XLMRobertaForSequenceClassification": ("XLMRobertaForSequenceClassification", ROBERTA),
    "ElectraModel": ("ElectraModel", ELECTRA),
    "ElectraModel-no-projection": ("ElectraModel", UNPROJECTED),
    "ElectraForPreTraining": ("ElectraForPreTraining", ELECTRA),
    "ElectraForMaskedLM": ("ElectraForMaskedLM", ELECTRA),
    "ElectraForSequenceClassification": ("ElectraForSequenceClassification", ELECTRA),
    "ElectraForTokenClassification": ("ElectraForTokenClassification", ELECTRA),
    "ElectraForQuestionAnswering": ("ElectraForQuestionAnswering", ELECTRA),
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


def test_masked_lm_decoder_is_the_word_embedding():
    config = RobertaConfig(vocab_size=40, **ROBERTA)
    model = js.models.roberta.RobertaForMaskedLM(config, rngs=js.Rngs(params=0))
    head = model.lm_head
    assert head.decoder.weight is model.roberta.embeddings.word_embeddings.weight
    assert head.bias is head.decoder.bias and model.roberta.pooler is None
    untied = RobertaConfig(vocab_size=40, tie_word_embeddings=False, **ROBERTA)
    head = js.models.roberta.RobertaForMaskedLM(untied, rngs=js.Rngs(params=0)).lm_head
    assert head.bias is not head.decoder.bias


def test_roberta_positions_count_past_the_padding(tmp_path):
    """Positions from ``pad_token_id + 1`` over the tokens (``input_ids``), or consecutive
    (``inputs_embeds``, as transformers: it cannot tell the padding); the limit is the table
    less the positions up to the padding index."""
    import torch

    ref = reference("RobertaModel", ROBERTA, tmp_path)
    model = js.models.from_pretrained(tmp_path)
    ids = np.where(MASK == 1, TOKENS, 1)
    embeds = np.asarray(model.embeddings.word_embeddings(jnp.asarray(ids)))
    hidden, pooled = model(inputs_embeds=jnp.asarray(embeds), attention_mask=jnp.asarray(MASK))
    with torch.no_grad():
        out = ref(inputs_embeds=torch.tensor(embeds), attention_mask=torch.tensor(MASK))
    np.testing.assert_allclose(hidden, out.last_hidden_state.numpy(), atol=1e-5)
    np.testing.assert_allclose(pooled, out.pooler_output.numpy(), atol=1e-5)
    model(jnp.ones((1, 14), jnp.int32))  # positions 2..15
    with pytest.raises(ValueError, match=r"exceeds max_position_embeddings=16 less the 2 pos"):
        model(jnp.ones((1, 15), jnp.int32))


def test_electra_has_no_pooler_and_projects_only_where_sizes_differ():
    model = ElectraModel(ElectraConfig(vocab_size=40, **ELECTRA), rngs=js.Rngs(params=0))
    assert model.pooler is None and model.embeddings_project is not None
    assert model.embeddings.word_embeddings.weight.value.shape == (40, 16)
    hidden, pooled = model.eval()(jnp.asarray(TOKENS))
    assert hidden.shape == (3, 8, 32) and pooled is None
    same = ElectraModel(ElectraConfig(vocab_size=40, **UNPROJECTED), rngs=js.Rngs(params=0))
    assert same.embeddings_project is None
    assert not any("embeddings_project" in key for key in same.state_dict())


def test_xlm_roberta_writes_its_own_model_type(tmp_path):
    ref = reference("XLMRobertaForTokenClassification", ROBERTA, tmp_path / "hf")
    model = js.models.from_pretrained(tmp_path / "hf")
    assert type(model.roberta).__name__ == "XLMRobertaModel"
    assert model.config.model_type == ref.config.model_type == "xlm-roberta"
    model.save_pretrained(tmp_path / "js")
    assert js.models.from_pretrained(tmp_path / "js").config.model_type == "xlm-roberta"


def test_question_answering_needs_two_labels():
    with pytest.raises(ValueError, match="num_labels=3, but the head gives start and end"):
        BertForQuestionAnswering(BertConfig(num_labels=3, **TINY), rngs=js.Rngs(params=0))


def test_heads_refuse_what_bert_refuses():
    with pytest.raises(NotImplementedError, match="RobertaModel: is_decoder=True"):
        RobertaModel(RobertaConfig(is_decoder=True, **ROBERTA), rngs=js.Rngs(params=0))
