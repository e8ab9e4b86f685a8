"""Every class js.models exports shows its constructor's parameters to ``inspect.signature``.

flax's metaclass ``__call__`` stands in front of ``__init__``; before issue 32 every model showed
``(*args, **kwargs)`` (js-core's ``Module`` now sets ``__signature__``).
"""

import importlib
import inspect
import pkgutil

import js.models


def _public_modules(package):
    """``package`` and every submodule without a private name, imported."""
    yield package
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            yield importlib.import_module(info.name)


def _exported_classes(package) -> dict[str, type]:
    """``{"module.Name": class}``: the js classes each public module exports (its ``__all__``,
    else its public names) whose constructor is a Python ``__init__``."""
    classes = {}
    for module in _public_modules(package):
        names = getattr(module, "__all__", None) or [n for n in dir(module) if n[0] != "_"]
        for name in names:
            value = getattr(module, name)
            if (
                inspect.isclass(value)
                and value.__module__.startswith("js.")
                and inspect.isfunction(value.__init__)
            ):
                classes[f"{module.__name__}.{name}"] = value
    return classes


def _constructor(cls) -> inspect.Signature:
    """``cls.__init__``'s signature without ``self``: what ``inspect.signature(cls)`` shows."""
    init = inspect.signature(cls.__init__)
    return init.replace(parameters=list(init.parameters.values())[1:])


def _hidden(classes: dict[str, type]) -> list[str]:
    return [
        f"{name}{inspect.signature(cls)}"
        for name, cls in sorted(classes.items())
        if inspect.signature(cls) != _constructor(cls)
    ]


def test_every_exported_class_shows_its_constructor():
    classes = _exported_classes(js.models)
    assert len(classes) > 30 and "js.models.GPT2LMHeadModel" in classes
    assert _hidden(classes) == []


def test_a_model_shows_its_config_parameter():
    assert list(inspect.signature(js.models.GPT2LMHeadModel).parameters)[0] == "config"


def test_a_head_forward_shows_its_base_models_arguments():
    from js.models.qwen3_moe import Qwen3MoeForCausalLM

    def names(cls):
        return list(inspect.signature(cls.forward).parameters)

    assert names(js.models.LlamaForCausalLM) == [
        "self", "input_ids", "attention_mask", "position_ids", "inputs_embeds", "cache", "rngs",
        "logits_to_keep",
    ]  # fmt: skip
    assert names(js.models.GPT2LMHeadModel)[:4] == [
        "self", "input_ids", "attention_mask", "token_type_ids"
    ]  # fmt: skip
    assert names(Qwen3MoeForCausalLM)[-2:] == ["logits_to_keep", "output_router_logits"]
    assert js.models.Qwen2ForCausalLM.__module__ == "js.models.llama"


def test_renamed_skeleton_hooks_are_refused_with_what_to_write_now():
    import pytest

    from js.models._decoder import DecoderForCausalLM, DecoderLayer, DecoderModel
    from js.models.bert import BertConfig, BertEmbeddings

    with pytest.raises(TypeError, match="embed_dropout_name was renamed.*embedding_dropout = "):
        type("Old", (DecoderModel,), {"embed_dropout_name": "drop"})
    with pytest.raises(TypeError, match="dropout_key was renamed.*dropouts = "):
        type("Old", (DecoderLayer,), {"dropout_key": "resid_pdrop"})
    with pytest.raises(TypeError, match="head_bias was renamed.*on the config class"):
        type("Old", (DecoderForCausalLM,), {"head_bias": lambda self: True})
    with pytest.raises(TypeError, match=r"Fix: def cached_step\(self, inputs, options\)"):
        type("Old", (DecoderForCausalLM,), {"cached_step": lambda self, ids, mask, e, c: None})
    with pytest.raises(TypeError, match="position_padding_idx is no longer an argument"):
        BertEmbeddings(BertConfig(hidden_size=8), rngs=js.Rngs(params=0), position_padding_idx=1)
