"""js.models.Tokenizer against transformers' AutoTokenizer on the same folders: tokenizers trained
here (a BPE with byte fallback like Llama's, a byte-level BPE like GPT-2/Qwen's, a WordPiece like
BERT's, a Unigram) saved by transformers' ``save_pretrained``, with real chat templates (Llama 3,
Qwen 2.5 with tools, Gemma). Ids, masks, decoded text and rendered chats are equal. Nothing
downloads."""

# ruff: noqa: E501 (the Qwen template is copied as text, long lines and all)

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from llama_support import transformers_without_torchvision

from js.models import Tokenizer

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
pytest.importorskip("transformers")
with transformers_without_torchvision() as transformers:
    pass
from tokenizers import Tokenizer as Backend  # noqa: E402
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "Hello world, how are you today? I'm fine, don't worry!",
    "Tokenizers turn text into ids and ids back into text.",
    "Ünïcödé, 日本語 and emoji 😀 are bytes too",
] * 8
TEXTS = [
    "Hello world!",
    "the lazy dog doesn't jump , he 's tired .",
    "ids 😀 and 日本",
    "a much longer sentence about the quick brown fox that jumps over the lazy dog again",
]
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception("
    "'Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}"
    "{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + "
    "message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{'<start_of_turn>model\n'}}{% endif %}"
)
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
QWEN_TOOLS = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
CHAT = [
    {"role": "user", "content": "Hello, who are you?"},
    {"role": "assistant", "content": " I am a tiny model. "},
    {"role": "user", "content": "What is the weather in Paris?"},
]
SYSTEM = [{"role": "system", "content": "Be brief."}, *CHAT]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": 'The weather in a city <now> & "today"',
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_TURN = [
    *CHAT,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    },
    {"role": "tool", "content": "sunny, 21°C"},
]

DOCUMENTS = [{"title": "Paris", "text": "Sunny all week."}, {"title": "Oslo", "text": "Snow."}]
DOCUMENTS_TEMPLATE = (
    "{% for doc in documents %}[{{ loop.index }}] {{ doc.title }}: {{ doc.text }}\n{% endfor %}"
    "{{ messages[-1]['content'] }}{% if add_generation_prompt %}\nAnswer:{% endif %}"
)


def _bpe(trainer_specials, *, byte_level):
    backend = Backend(models.BPE(unk_token=None if byte_level else "<unk>"))
    if byte_level:
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:  # Llama's: "▁" for spaces, unknown characters as <0xNN> byte tokens
        backend.normalizer = normalizers.Sequence(
            [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
        )
        backend.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
             decoders.Strip(" ", 1, 0)]
        )  # fmt: skip
        alphabet = []
    trainer = trainers.BpeTrainer(
        vocab_size=160, special_tokens=trainer_specials, initial_alphabet=alphabet
    )
    backend.train_from_iterator(CORPUS[:3], trainer)
    if byte_level:
        return backend
    spec = json.loads(backend.to_str())  # the 256 byte tokens after the specials, as Llama's
    vocab = list(spec["model"]["vocab"])
    order = vocab[:3] + [f"<0x{i:02X}>" for i in range(256)] + vocab[3:]
    spec["model"].update(vocab={t: i for i, t in enumerate(order)}, byte_fallback=True)
    spec["model"]["fuse_unk"] = True
    for token in spec["added_tokens"]:
        token["id"] = order.index(token["content"])
    return Backend.from_str(json.dumps(spec))


def _wordpiece():
    backend = Backend(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    backend.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=150, special_tokens=specials)
    )
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return backend


def _unigram():
    backend = Backend(models.Unigram())
    backend.normalizer = normalizers.NFKC()
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    trainer = trainers.UnigramTrainer(vocab_size=150, special_tokens=specials, unk_token="<unk>")
    backend.train_from_iterator(CORPUS, trainer)
    return backend


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> a folder saved by transformers' ``save_pretrained``."""
    fast = transformers.PreTrainedTokenizerFast
    llama3 = ["<unk>", "<|begin_of_text|>", "<|eot_id|>"]
    qwen = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    made = {
        "llama": fast(
            tokenizer_object=_bpe(llama3, byte_level=False), bos_token="<|begin_of_text|>",
            eos_token="<|eot_id|>", unk_token="<unk>", add_bos_token=True, chat_template=LLAMA3,
        ),
        "qwen": fast(
            tokenizer_object=_bpe(qwen, byte_level=True), eos_token="<|im_end|>",
            pad_token="<|endoftext|>", chat_template={"default": CHATML, "tool_use": QWEN_TOOLS},
        ),
        "bert": fast(
            tokenizer_object=_wordpiece(), unk_token="[UNK]", sep_token="[SEP]",
            pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
            clean_up_tokenization_spaces=True, truncation_side="left",
            model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        ),
        "gemma": fast(
            tokenizer_object=_unigram(), bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
            pad_token="<pad>", padding_side="left", chat_template=GEMMA,
        ),
    }  # fmt: skip
    paths = {}
    for name, tokenizer in made.items():
        paths[name] = tmp_path_factory.mktemp(name)
        tokenizer.save_pretrained(paths[name])
    config = paths["gemma"] / "tokenizer_config.json"  # ignored beside tokenizer.json, as there
    config.write_text(json.dumps({**json.loads(config.read_text()), "add_bos_token": True,
                                  "add_eos_token": True, "model_max_length": 12}))  # fmt: skip
    return paths


@pytest.fixture(scope="module")
def pairs(folders):
    """name -> (js's Tokenizer, transformers' AutoTokenizer) of each folder."""
    auto = transformers.AutoTokenizer.from_pretrained
    return {name: (Tokenizer.from_pretrained(p), auto(p)) for name, p in folders.items()}


def _same(ours, theirs):
    assert set(ours) == set(theirs)
    for key in ours:
        np.testing.assert_array_equal(ours[key], np.asarray(theirs[key]), err_msg=key)


@pytest.mark.parametrize("name", ["llama", "qwen", "bert", "gemma"])
def test_ids_masks_and_text_equal_transformers(pairs, name):
    ours, theirs = pairs[name]
    for options in (
        {"padding": True},
        {"padding": "longest", "padding_side": "left"},
        {"padding": "max_length", "max_length": 24, "truncation": True},
        {"padding": True, "truncation": True, "max_length": 6},
        {"padding": True, "add_special_tokens": False},
        {"padding": True, "truncation": True},  # model_max_length
    ):
        if theirs.pad_token is None:  # Llama's has none: rows of their own lengths, as lists
            options = {k: v for k, v in options.items() if k not in ("padding", "padding_side")}
            assert ours(TEXTS, return_tensors=None, **options) == dict(theirs(TEXTS, **options))
        else:
            _same(ours(TEXTS, **options), theirs(TEXTS, return_tensors="np", **options))
    assert ours(TEXTS[1], return_tensors=None) == dict(theirs(TEXTS[1]))
    assert ours.encode(TEXTS[2]) == theirs.encode(TEXTS[2])
    ids = ours(TEXTS[:1] if theirs.pad_token is None else TEXTS, padding=bool(theirs.pad_token))
    ids = ids["input_ids"]
    for skip in (False, True):
        assert ours.batch_decode(ids, skip_special_tokens=skip) == theirs.batch_decode(
            ids, skip_special_tokens=skip
        )
    clean = {"clean_up_tokenization_spaces": False}
    assert ours.decode(ids[-1], **clean) == theirs.decode(ids[-1], **clean)
    assert (len(ours), ours.vocab_size) == (len(theirs), theirs.vocab_size)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        assert getattr(ours, key) == getattr(theirs, key), key
    tokens = theirs.convert_ids_to_tokens(ids[0].tolist())
    assert ours.convert_ids_to_tokens(ids[0]) == tokens
    assert ours.convert_tokens_to_ids([*tokens, "never-seen"]) == theirs.convert_tokens_to_ids(
        [*tokens, "never-seen"]
    )
    assert ours.padding_side == theirs.padding_side


@pytest.mark.parametrize(
    ("name", "chat", "options"),
    [
        ("llama", SYSTEM, {}),
        ("llama", CHAT, {"add_generation_prompt": True}),
        ("qwen", SYSTEM, {"add_generation_prompt": True}),
        ("qwen", TOOL_TURN, {"tools": TOOLS, "add_generation_prompt": True}),
        ("qwen", CHAT, {"chat_template": "tool_use"}),
        ("gemma", CHAT, {"add_generation_prompt": True}),
        ("gemma", CHAT[:2], {"continue_final_message": True}),
        ("gemma", [CHAT, CHAT[:1]], {"add_generation_prompt": True}),
        (
            "gemma",
            [CHAT, CHAT[:1]],
            {"padding": True, "truncation": True, "max_length": 40, "return_tensors": "np"},
        ),
        ("qwen", CHAT, {"chat_template": DOCUMENTS_TEMPLATE, "documents": DOCUMENTS}),
    ],
)
def test_chat_templates_equal_transformers(pairs, name, chat, options):
    ours, theirs = pairs[name]
    text = ours.apply_chat_template(chat, tokenize=False, **options)
    assert text == theirs.apply_chat_template(chat, tokenize=False, **options)
    if "return_tensors" in options:
        _same(
            ours.apply_chat_template(chat, **options), theirs.apply_chat_template(chat, **options)
        )
        return
    assert ours.apply_chat_template(chat, **options) == dict(
        theirs.apply_chat_template(chat, **options)
    )
    ids = ours.apply_chat_template(chat, return_dict=False, **options)
    assert ids == theirs.apply_chat_template(chat, return_dict=False, **options)


def test_chat_template_errors(pairs):
    import jinja2

    gemma, theirs = pairs["gemma"]
    for tokenizer in (gemma, theirs):
        with pytest.raises(jinja2.TemplateError, match="System role not supported"):
            tokenizer.apply_chat_template(SYSTEM)
    with pytest.raises(ValueError, match="conversation is empty"):
        gemma.apply_chat_template([])
    with pytest.raises(ValueError, match="add_generation_prompt both set"):
        gemma.apply_chat_template(CHAT, continue_final_message=True, add_generation_prompt=True)
    with pytest.raises(ValueError, match="template drops the final message"):
        gemma.apply_chat_template(
            CHAT, chat_template="{{ bos_token }}", continue_final_message=True
        )
    with pytest.raises(ValueError, match="no chat template"):
        pairs["bert"][0].apply_chat_template(CHAT)
    with pytest.raises(NotImplementedError, match="return_assistant_tokens_mask is not supported"):
        gemma.apply_chat_template(CHAT, return_assistant_tokens_mask=True)
    with pytest.raises(TypeError, match="tools must be JSON schemas"):
        gemma.apply_chat_template(CHAT, tools=[len])
    with pytest.raises(TypeError, match="documents must be dicts"):
        gemma.apply_chat_template(CHAT, documents=["Paris is sunny"])
    qwen = pairs["qwen"][0]
    qwen.chat_template = {"tool_use": QWEN_TOOLS}
    with pytest.raises(ValueError, match=r"no default. Fix: chat_template= one of \['tool_use'\]"):
        qwen.apply_chat_template(CHAT)


def test_save_sentencepiece_and_missing_libraries(folders, pairs, tmp_path, monkeypatch):
    ours, theirs = pairs["llama"]
    ours.save_pretrained(tmp_path)
    again = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert again(TEXTS)["input_ids"] == theirs(TEXTS)["input_ids"]
    assert Tokenizer.from_pretrained(tmp_path).chat_template == LLAMA3
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tokenizer.model").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"AutoTokenizer.from_pretrained\(folder\)"):
        Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        Tokenizer.from_pretrained(tmp_path / "tokenizer.model")
    with pytest.raises(ValueError, match="no pad_token"):
        ours(TEXTS, padding=True)
    with pytest.raises(ValueError, match="rows of different lengths"):
        ours(TEXTS)
    with pytest.raises(ValueError, match="padding_side='up'"):
        pairs["qwen"][0](TEXTS, padding=True, padding_side="up")
    with pytest.raises(ValueError, match="padding='most'"):
        pairs["qwen"][0](TEXTS, padding="most")
    with pytest.raises(ValueError, match="return_tensors='pt'"):
        ours(TEXTS[0], return_tensors="pt")
    fresh = Tokenizer.from_pretrained(folders["gemma"])
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(ImportError, match=r'pip install "js-models\[text\]"'):
        fresh.apply_chat_template(CHAT, chat_template="{{ 1 }}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r'pip install "js-models\[text\]"'):
        Tokenizer.from_pretrained(folders["gemma"])
