"""Fixtures of the js-models tests: each family's shared helpers live in
``<family>_support.py`` beside its tests, importable from here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def _import_reference_libraries() -> None:
    """Pay the reference libraries' imports once, here, at collection time.

    ``import transformers`` (with the model classes the tests build) takes 10-15 s on a 2-core
    machine, timm and peft a few more; otherwise that time lands in whichever test first needs
    them (a module fixture's setup, a test's call) and pushes that one test over the per-test
    time limit. Importing them here changes no test: every later import is a ``sys.modules``
    hit. transformers is imported with torchvision hidden and timm with its stand-ins, exactly
    as the support modules do (transformers first: it must see torchvision as absent, which it
    caches, before timm's stand-ins briefly exist). A library that is not installed is left
    for the tests themselves to skip on, so the suite still collects without it.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    from llama_support import transformers_without_torchvision

    try:
        with transformers_without_torchvision() as transformers:
            for name in (  # their lazy imports, while torchvision is hidden
                "AutoModelForCausalLM",
                "BertForSequenceClassification",
                "BertModel",
                "GPT2LMHeadModel",
                "GPTNeoXForCausalLM",
                "Gemma2ForCausalLM",
                "Gemma3ForCausalLM",
                "GemmaForCausalLM",
                "GraniteForCausalLM",
                "LlamaForCausalLM",
                "LogitsProcessorList",
                "MistralForCausalLM",
                "MixtralForCausalLM",
                "Olmo2ForCausalLM",
                "Phi3ForCausalLM",
                "PhiForCausalLM",
                "Qwen2ForCausalLM",
                "Qwen2MoeForCausalLM",
                "Qwen3ForCausalLM",
                "Qwen3MoeForCausalLM",
                "SmolLM3ForCausalLM",
                "ViTForImageClassification",
                "ViTModel",
            ):
                getattr(transformers, name)
            import transformers.generation.logits_process  # noqa: F401

            try:
                import peft  # noqa: F401
            except ImportError:
                pass
    except ImportError:
        pass
    try:
        from timm_support import import_timm

        import_timm()
    except ImportError:
        pass


_import_reference_libraries()


@pytest.fixture(scope="module")
def transformers():
    """transformers, imported with torchvision hidden (its wheel here cannot be imported beside
    the CPU torch); a test module may define its own."""
    from llama_support import transformers_without_torchvision

    with transformers_without_torchvision() as module:
        yield module
