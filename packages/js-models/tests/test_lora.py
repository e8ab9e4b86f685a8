"""LoRA on js-models' GPT-2 and Llama against Hugging Face PEFT 0.21 (random-initialised tiny
models saved with save_pretrained; nothing downloads): PEFT's adapters load into js with the same
logits, js's load into PEFT, and five AdamW steps give the same losses."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from llama_support import transformers_without_torchvision

import js
import js.models
import js.optim
from js.nn import lora

pytestmark = [
    pytest.mark.torch,
    # peft 0.21 calls transformers 5's deprecated name (not js's warning)
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]
torch = pytest.importorskip("torch")

IDS = np.array([[5, 9, 13, 2, 40, 7, 1, 30], [3, 3, 8, 21, 60, 1, 17, 2]])
GPT2 = dict(
    n_embd=32,
    n_layer=2,
    n_head=4,
    vocab_size=64,
    n_positions=16,
    bos_token_id=0,
    eos_token_id=0,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
)
LLAMA = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    bos_token_id=0,
    eos_token_id=0,
)
# family: (config class, model class, config, PEFT's target_modules, fan_in_fan_out)
FAMILIES = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", GPT2, ["c_attn", "c_fc"], True),
    "llama": ("LlamaConfig", "LlamaForCausalLM", LLAMA, ["q_proj", "v_proj", "down_proj"], False),
}


def _libraries() -> tuple[Any, Any]:
    with transformers_without_torchvision() as transformers:
        transformers.GPT2LMHeadModel  # noqa: B018  (lazy imports, while torchvision is hidden)
        transformers.LlamaForCausalLM  # noqa: B018
        import peft

        return transformers, peft


def _reference(family: str, folder) -> Any:
    """A random transformers model (eval mode), saved to ``folder``."""
    tf, _ = _libraries()
    config_name, model_name, config, _, _ = FAMILIES[family]
    torch.manual_seed(0)
    model = getattr(tf, model_name)(getattr(tf, config_name)(**config)).eval()
    model.save_pretrained(str(folder))
    return model


def _peft_model(family: str, base: Any, seed: int = 1) -> Any:
    """PEFT's LoRA (r=4, alpha=8) on ``base``, lora_B drawn at random so that it counts."""
    _, peft = _libraries()
    _, _, _, targets, fan_in_fan_out = FAMILIES[family]
    config = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=targets, fan_in_fan_out=fan_in_fan_out
    )
    model = peft.get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    return model


def _torch_logits(model: Any) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.tensor(IDS)).logits.numpy()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_peft_adapter_loads_with_the_same_logits(family, tmp_path):
    peft_model = _peft_model(family, _reference(family, tmp_path / "base")).eval()
    peft_model.save_pretrained(str(tmp_path / "adapter"))
    model = js.models.from_pretrained(tmp_path / "base").eval()
    paths = lora.load_adapter(model, tmp_path / "adapter")
    assert len(paths) == 2 * len(FAMILIES[family][3])
    expected = _torch_logits(peft_model)
    np.testing.assert_allclose(np.asarray(model(input_ids=IDS)), expected, rtol=1e-5, atol=2e-5)
    lora.merge(model)  # merged into the base weights: the same logits from the plain layers
    assert all(not isinstance(m, js.nn.LoRALinear) for m in model.modules())
    np.testing.assert_allclose(np.asarray(model(input_ids=IDS)), expected, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_js_adapter_loads_in_peft_with_the_same_logits(family, tmp_path):
    _, peft = _libraries()
    base = _reference(family, tmp_path / "base")
    model = js.models.from_pretrained(tmp_path / "base").eval()
    targets = [f"*.{name}" for name in FAMILIES[family][3]]
    lora.inject(model, targets, r=2, alpha=6, rngs=js.Rngs(params=3))
    rng = np.random.default_rng(0)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            param.value = jnp.asarray(rng.standard_normal(param.value.shape) * 0.1, jnp.float32)
    lora.save_adapter(model, tmp_path / "adapter", task_type="CAUSAL_LM")
    peft_model = peft.PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    np.testing.assert_allclose(
        np.asarray(model(input_ids=IDS)), _torch_logits(peft_model), rtol=1e-5, atol=2e-5
    )


def _js_loss(model: js.Module, ids: jax.Array) -> jax.Array:
    """transformers' causal-LM loss: the next token's cross-entropy, averaged."""
    logits = model(input_ids=ids)[:, :-1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1).mean()


# Eagerly, the first step compiles each of the forward's and backward's operations on its own
# (~10 s for Llama, ~20 s for GPT-2 on a 2-core machine): the eager runs are slow. The default
# run takes the same five steps through one js.jit program of the loss and gradients (~2 s).
@pytest.mark.parametrize(
    ("family", "compiled"),
    [
        pytest.param("gpt2", False, marks=pytest.mark.slow, id="gpt2-eager"),
        pytest.param("llama", False, marks=pytest.mark.slow, id="llama-eager"),
        pytest.param("llama", True, id="llama-jit"),
    ],
)
def test_five_adamw_steps_give_peft_s_losses(family, compiled, tmp_path):
    peft_model = _peft_model(family, _reference(family, tmp_path / "base")).train()
    peft_model.save_pretrained(str(tmp_path / "adapter"))
    model = js.models.from_pretrained(tmp_path / "base").train()
    lora.load_adapter(model, tmp_path / "adapter")
    lr, wd = 1e-2, 0.01
    optimizer = torch.optim.AdamW(
        [p for p in peft_model.parameters() if p.requires_grad], lr=lr, weight_decay=wd
    )
    js_optimizer = js.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert len(params) == sum(p.requires_grad for p in peft_model.parameters())
    assert sorted(js_optimizer.frozen) == sorted(  # the base: no optimizer state
        n for n, p in model.named_parameters() if not p.requires_grad
    )
    batches = [IDS] * 5  # one batch five times: the losses fall
    value_and_grad = js.value_and_grad(_js_loss)
    if compiled:
        value_and_grad = js.jit(value_and_grad)
    torch_losses, js_losses = [], []
    for ids in batches:
        optimizer.zero_grad()
        loss = peft_model(input_ids=torch.tensor(ids), labels=torch.tensor(ids)).loss
        loss.backward()
        optimizer.step()
        torch_losses.append(loss.item())
        value, grads = value_and_grad(model, jnp.asarray(ids))
        flat = {".".join(map(str, k)): g for k, g in nnx.to_flat_state(grads)}
        assert sorted(flat) == sorted(params)  # the frozen base gets no gradient
        js_optimizer.step(grads)
        js_losses.append(float(value))
    assert torch_losses[-1] < torch_losses[0] - 0.05  # the adapters learn
    np.testing.assert_allclose(js_losses, torch_losses, rtol=2e-5)


def test_optimizer_state_of_lora_r8_against_full_fine_tuning_of_gpt2_124m():
    """Adam keeps two float32 moments per trainable number: LoRA r=8 on c_attn (PEFT's default
    target for GPT-2) against every parameter of GPT2Config() (124M), from shapes only."""
    tf, peft = _libraries()
    with torch.device("meta"):
        base = tf.GPT2LMHeadModel(tf.GPT2Config())
    full = sum(p.numel() for p in base.parameters())  # the tied head counted once
    peft_model = peft.get_peft_model(
        base, peft.LoraConfig(r=8, target_modules=["c_attn"], fan_in_fan_out=True)
    )
    trainable, _ = peft_model.get_nb_trainable_parameters()
    # js's count: lora_A [r, in] + lora_B [out, r] on each of the 12 c_attn [768 -> 2304]
    config = js.models.GPT2Config()
    assert trainable == config.n_layer * 8 * (config.n_embd + 3 * config.n_embd) == 294_912
    assert full == 124_439_808
    moments = 2 * 4  # bytes per trainable number
    assert (full * moments, trainable * moments) == (995_518_464, 2_359_296)


def test_vit_adapters_cross_in_transformers_5_s_module_names(tmp_path):
    """transformers 5 renamed ViT's modules (``layers.N.attention.q_proj``) and PEFT names its
    adapters after them; js's ViT keeps the files' names, and its class maps between the two."""
    from bertvit_support import PIXELS, rel, vit_outputs, vit_reference

    _, peft = _libraries()
    ref = vit_reference(num_labels=5)
    ref.save_pretrained(str(tmp_path / "base"))
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "fc1"])
    peft_model = peft.get_peft_model(ref, config)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    peft_model.eval().save_pretrained(str(tmp_path / "adapter"))
    model = js.models.from_pretrained(tmp_path / "base").eval()
    paths = model.load_adapter(tmp_path / "adapter")
    assert "vit.encoder.layer.0.attention.attention.query" in paths and len(paths) == 6
    expected = vit_outputs(peft_model).logits
    assert rel(model(jnp.asarray(PIXELS)), expected) < 1e-5
    model.save_adapter(tmp_path / "js")  # back in transformers 5's names, for PEFT
    fresh = vit_reference(num_labels=5)
    loaded = peft.PeftModel.from_pretrained(fresh, str(tmp_path / "js")).eval()
    assert rel(vit_outputs(loaded).logits, expected) < 1e-5
