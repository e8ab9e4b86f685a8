"""Text to token ids and back, as transformers' fast tokenizer does it, without transformers.

A Hugging Face folder's ``tokenizer.json`` is run by the ``tokenizers`` library (transformers' own
backend); ``tokenizer_config.json`` (over ``special_tokens_map.json``) supplies what transformers
keeps outside it: the named special tokens, the padding and truncation sides,
``model_max_length``, ``clean_up_tokenization_spaces`` and the chat template (``_chat_template``).
``add_bos_token``/``add_eos_token`` are ignored, as transformers 5 ignores them beside
``tokenizer.json``: its post-processor adds the special tokens. Where the config's
``tokenizer_class`` is one whose ``__init__`` transformers 5 rebuilds the pipeline in (Llama,
Gemma, Qwen 2, T5, GPT-2, RoBERTa/BART, Whisper, BERT, XLM-R), js rebuilds it the same way
(``_tokenizer_classes``). ``tokenizers`` and ``jinja2`` are
the ``text`` extra and are imported on first use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._chat_template import pick_template, read_templates, render, tool_schemas
from ._tokenizer_classes import BERT_LIKE, rebuild, rebuild_of

__all__ = ["Tokenizer"]

SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
_UNLIMITED = int(1e20)  # transformers' LARGE_INTEGER: a model_max_length above it means "no limit"
_INSTALL = 'pip install "js-models[text]"'
_CLEANUPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"))
_CLEANUPS += ((" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def _content(token: Any) -> str | None:
    """A special token as written: a string, or an ``AddedToken`` record's ``content``."""
    return token.get("content") if isinstance(token, dict) else token


def import_tokenizers() -> Any:
    try:
        import tokenizers  # pyright: ignore[reportMissingImports]
    except ImportError:
        raise ImportError(
            "Tokenizer: text needs the tokenizers library (transformers' tokenizer backend), which "
            f"is not installed. Fix: {_INSTALL} (or pip install tokenizers)"
        ) from None
    return tokenizers


def read_files(folder: str | Path) -> dict[str, bytes]:
    """A tokenizer folder's files (name -> bytes), chat templates included."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"Tokenizer: {folder} is not a folder. Fix: pass a model folder")
    names = [p for p in sorted(folder.iterdir()) if p.suffix in (".json", ".jinja", ".model")]
    names += sorted((folder / "additional_chat_templates").glob("*.jinja"))
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in names if p.is_file()}


def read_config(files: Mapping[str, bytes]) -> dict[str, Any]:
    """``special_tokens_map.json`` updated by ``tokenizer_config.json`` (either may be absent)."""
    names = ("special_tokens_map.json", "tokenizer_config.json")
    return {k: v for n in names for k, v in json.loads(files.get(n, b"{}")).items()}


def write_files(files: Mapping[str, bytes], folder: str | Path) -> None:
    """Write ``read_files``' files into ``folder``."""
    for name, data in files.items():
        path = Path(folder) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


class _SpecialId:
    """``tokenizer.eos_token_id`` and its kin: ``token_id`` of the token the name says."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.token = name.removesuffix("_id")

    def __get__(self, tokenizer: Tokenizer, owner: type | None = None) -> int | None:
        return tokenizer.token_id(self.token)


class Tokenizer:
    """A folder's fast tokenizer: ``tokenizer(texts)`` gives ``input_ids`` and ``attention_mask``
    (transformers' ``AutoTokenizer`` results), ``decode`` turns ids back into text and
    ``apply_chat_template`` renders chat messages with the folder's template.

    Build it with ``Tokenizer.from_pretrained(folder)``.

    Args:
        files: file name -> contents; ``tokenizer.json`` is required, ``tokenizer_config.json``,
            ``special_tokens_map.json`` and chat template files are read where present.

    Attributes:
        backend: the ``tokenizers.Tokenizer``.
        config: ``special_tokens_map.json`` updated by ``tokenizer_config.json``.
        padding_side, truncation_side: ``"right"`` or ``"left"``.
        model_max_length: the length ``truncation=True`` cuts to (None: no limit).
        chat_template: the template (a string), a dict of named templates, or None.

    Example:
        >>> import json, pathlib, tempfile
        >>> from tokenizers import Tokenizer as Backend, models, pre_tokenizers
        >>> from js.models import Tokenizer
        >>> words = models.WordLevel({"[PAD]": 0, "hello": 1, "world": 2}, unk_token="[PAD]")
        >>> backend = Backend(words)
        >>> backend.pre_tokenizer = pre_tokenizers.Whitespace()
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> backend.save(str(folder / "tokenizer.json"))
        >>> config = {"pad_token": "[PAD]", "chat_template": "{{ messages[0].content }}!"}
        >>> _ = (folder / "tokenizer_config.json").write_text(json.dumps(config))
        >>> tokenizer = Tokenizer.from_pretrained(folder)
        >>> tokenizer(["hello world", "world"], padding=True, padding_side="left")["input_ids"]
        array([[1, 2],
               [0, 2]])
        >>> tokenizer.decode([1, 2])
        'hello world'
        >>> tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
        'hi!'
    """

    def __init__(self, files: Mapping[str, bytes]):
        self.files = dict(files)
        if "tokenizer.json" not in self.files:
            raise FileNotFoundError(_missing_json(self.files))
        tokenizers = import_tokenizers()
        self.config = read_config(self.files)
        text = self.files["tokenizer.json"].decode()
        self.backend: Any = rebuild(text, self.config, tokenizers)
        padding = self.backend.padding or {}
        side = padding.get("direction", getattr(rebuild_of(self.config), "padding_side", "right"))
        self.padding_side = self.config.get("padding_side", side)
        self.truncation_side = self.config.get("truncation_side", "right")
        limit = self.config.get("model_max_length")
        self.model_max_length = None if limit is None or limit > _UNLIMITED else int(limit)
        self.special_tokens = {k: _content(self.config.get(k)) for k in SPECIAL_TOKENS}
        if self.special_tokens["pad_token"] is None and padding:
            self.special_tokens["pad_token"] = padding.get("pad_token")
        self.chat_template = read_templates(self.files, self.config)
        self.model_input_names = list(
            self.config.get("model_input_names", _input_names(self.config))
        )
        self._add_tokens(tokenizers)
        self.backend.no_truncation()
        self.backend.no_padding()

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> Tokenizer:
        """The tokenizer of a Hugging Face folder (``tokenizer.json`` and its config files)."""
        return cls(read_files(folder))

    def save_pretrained(self, folder: str | Path) -> None:
        """Write the tokenizer's files, as read, into ``folder``."""
        write_files(self.files, folder)

    def _add_tokens(self, tokenizers: Any) -> None:
        """transformers 5's loading: the config's added tokens and the named special tokens that
        ``tokenizer.json`` lacks are added (special). Its post-processor decides ``bos``/``eos``:
        transformers 5 ignores ``add_bos_token``/``add_eos_token`` beside ``tokenizer.json``."""
        have = {t.content for t in self.backend.get_added_tokens_decoder().values()}
        decoder = self.config.get("added_tokens_decoder", {})
        new = [decoder[i] for i in sorted(decoder, key=int) if decoder[i]["content"] not in have]
        new = [tokenizers.AddedToken(**{k: v for k, v in t.items() if k != "__type"}) for t in new]
        named = dict.fromkeys(t for t in self.special_tokens.values() if t is not None)
        new += [tokenizers.AddedToken(t, special=True) for t in named if t not in have]
        if new:
            self.backend.add_tokens(new)
        if self.backend.post_processor is None:  # transformers' update_post_processor, no bos/eos
            template = tokenizers.processors.TemplateProcessing
            self.backend.post_processor = template(single="$A:0", pair="$A:0 $B:1")

    def __call__(
        self,
        text: str | Sequence[str],
        *,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        add_special_tokens: bool = True,
        padding_side: str | None = None,
        pad_to_multiple_of: int | None = None,
        return_tensors: str | None = "np",
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict[str, Any]:
        """``input_ids`` and ``attention_mask`` (and ``token_type_ids`` where the tokenizer's
        ``model_input_names`` has them) of a text or a list of texts, as transformers gives them.

        Args:
            text: a string (one row) or a list of strings.
            padding: ``True``/``"longest"`` pads to the longest row, ``"max_length"`` to
                ``max_length``; ``False`` does not pad.
            truncation: ``True``/``"longest_first"`` cuts rows to ``max_length`` (default
                ``model_max_length``) on ``truncation_side``; None: only where ``max_length`` is
                given without padding.
            max_length: the padding/truncation length.
            add_special_tokens: add the post-processor's tokens (``bos``, ``[CLS]``...).
            padding_side: ``"left"`` (generation) or ``"right"``; default ``self.padding_side``.
            pad_to_multiple_of: round the padded length up to a multiple of this.
            return_tensors: ``"np"``: ``[N, L]`` int64 arrays; None: lists (a string's unnested).
            return_token_type_ids, return_attention_mask: override ``model_input_names``.
        """
        rows = [text] if isinstance(text, str) else list(text)
        self._configure(padding, truncation, max_length, padding_side, pad_to_multiple_of)
        encodings = self.backend.encode_batch(rows, add_special_tokens=add_special_tokens)
        out = {"input_ids": [e.ids for e in encodings]}
        if self._returns("token_type_ids", return_token_type_ids):
            out["token_type_ids"] = [e.type_ids for e in encodings]
        if self._returns("attention_mask", return_attention_mask):
            out["attention_mask"] = [e.attention_mask for e in encodings]
        if return_tensors == "np":
            return {k: _array(v, k) for k, v in out.items()}
        if return_tensors is not None:
            raise ValueError(f"Tokenizer: return_tensors={return_tensors!r}. Fix: use 'np' or None")
        return {k: v[0] for k, v in out.items()} if isinstance(text, str) else out

    def _returns(self, name: str, given: bool | None) -> bool:
        return name in self.model_input_names if given is None else given

    def _configure(self, padding, truncation, max_length, padding_side, pad_to_multiple_of) -> None:
        """transformers' ``_get_padding_truncation_strategies`` + ``set_truncation_and_padding``."""
        if truncation is None:  # transformers: a max_length alone means truncate
            truncation = max_length is not None and padding in (False, "do_not_pad")
        truncation = "longest_first" if truncation is True else truncation or "do_not_truncate"
        padding = "longest" if padding is True else padding or "do_not_pad"
        if padding not in ("longest", "max_length", "do_not_pad"):
            raise ValueError(
                f"Tokenizer: padding={padding!r}. Fix: True, 'longest', 'max_length' or False"
            )
        limit = self.model_max_length if max_length is None else max_length
        if padding == "max_length" and limit is None:
            padding = "do_not_pad"  # transformers warns and does not pad
        if truncation == "do_not_truncate" or limit is None:
            self.backend.no_truncation()
        else:
            self.backend.enable_truncation(
                limit, strategy=truncation, direction=self.truncation_side
            )
        if padding == "do_not_pad":
            self.backend.no_padding()
            return
        pad = self.special_tokens["pad_token"]
        if pad is None or self.backend.token_to_id(pad) is None:
            raise ValueError(
                "Tokenizer: padding needs a pad token, and the tokenizer has no pad_token "
                "(tokenizer_config.json). Fix: padding=False, or set "
                "tokenizer.special_tokens['pad_token'] (e.g. to the eos_token)"
            )
        side = padding_side or self.padding_side
        if side not in ("left", "right"):
            raise ValueError(f"Tokenizer: padding_side={side!r}. Fix: 'left' or 'right'")
        length = limit if padding == "max_length" else None
        pad_type = int(self.config.get("pad_token_type_id", 0))
        self.backend.enable_padding(
            direction=side, pad_id=self.backend.token_to_id(pad), pad_token=pad,
            pad_type_id=pad_type, length=length, pad_to_multiple_of=pad_to_multiple_of,
        )  # fmt: skip

    def encode(self, text: str, *, add_special_tokens: bool = True, **options: Any) -> list[int]:
        """The ids of one text (``options`` as in ``__call__``: truncation, max_length...)."""
        return self(text, add_special_tokens=add_special_tokens, return_tensors=None, **options)[
            "input_ids"
        ]

    def decode(
        self,
        ids: Any,
        *,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> str:
        """The text of a row of ids (a list or a 1-d array), as transformers' ``decode``."""
        ids = np.asarray(ids).reshape(-1).tolist()
        text = self.backend.decode(ids, skip_special_tokens=skip_special_tokens)
        clean = clean_up_tokenization_spaces
        clean = self.config.get("clean_up_tokenization_spaces", False) if clean is None else clean
        # transformers skips the WordPiece clean-up for BPE models (it would eat real spaces)
        bpe = type(self.backend.model).__name__ == "BPE"
        if clean and not (bpe and not self.config.get(_FORCE_BPE_CLEANUP)):
            for old, new in _CLEANUPS:
                text = text.replace(old, new)
        return text

    def batch_decode(self, rows: Any, **options: Any) -> list[str]:
        """``decode`` of each row (``[N, L]`` ids); options as ``decode``'s."""
        return [self.decode(row, **options) for row in rows]

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int] | None:
        """A token's id (``unk_token``'s id when absent), or the ids of a list of tokens."""
        if isinstance(tokens, str):
            found = self.backend.token_to_id(tokens)
            return self.token_id("unk_token") if found is None else found
        return [self.convert_tokens_to_ids(t) for t in tokens]  # type: ignore[misc]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str] | None:
        """A token of an id, or the tokens of a list of ids."""
        if isinstance(ids, (int, np.integer)):
            return self.backend.id_to_token(int(ids))
        return [self.backend.id_to_token(int(i)) for i in ids]

    def token_id(self, name: str) -> int | None:
        """The id of a named special token (``"eos_token"``...), None when unset."""
        token = self.special_tokens[name]
        return None if token is None else self.backend.token_to_id(token)

    bos_token_id = _SpecialId()
    eos_token_id = _SpecialId()
    pad_token_id = _SpecialId()
    unk_token_id = _SpecialId()

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary, added tokens not counted (transformers' ``vocab_size``)."""
        return self.backend.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]] | Sequence[Sequence[Mapping[str, Any]]],
        *,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        chat_template: str | None = None,
        continue_final_message: bool = False,
        return_dict: bool = True,
        return_tensors: str | None = None,
        padding: bool | str = False,
        truncation: bool = False,
        max_length: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Render chat messages with the folder's Jinja template, as transformers 5 does.

        Args:
            messages: dicts with ``role`` and ``content`` (a list of such lists: a batch).
            add_generation_prompt: end with the header that starts the assistant's turn.
            tokenize: False: the rendered string; True: ``{"input_ids", "attention_mask"}``
                (lists, as transformers' ``BatchEncoding``; ``return_tensors="np"`` for arrays), no
                special tokens added beyond the template's.
            tools, documents: JSON schemas / ``{"title", "text"}`` dicts the template may render.
            chat_template: a template, or the name of one of the folder's named templates.
            continue_final_message: leave the last message open for the model to continue.
            return_dict: False: only ``input_ids``.
            padding, truncation, max_length: as in ``__call__``, for the rendered chats.
            **kwargs: further template variables (they override the special tokens).
        """
        batched = bool(messages) and not isinstance(messages[0], Mapping)
        chats = [list(c) for c in messages] if batched else [list(messages)]  # type: ignore[arg-type]
        if not chats[0]:
            raise ValueError(
                "Tokenizer.apply_chat_template: the conversation is empty. Fix: pass messages"
            )
        if continue_final_message and add_generation_prompt:
            raise ValueError(
                "Tokenizer.apply_chat_template: continue_final_message and add_generation_prompt "
                "both set. Fix: use one (continue the last message, or start the assistant's)"
            )
        for name in _UNSUPPORTED_CHAT_OPTIONS:
            if kwargs.get(name):
                raise NotImplementedError(
                    f"Tokenizer.apply_chat_template: {name} is not supported. Fix: leave it "
                    "unset (transformers' tokenizer has it)"
                )
        template = pick_template(self.chat_template, chat_template, tools)
        variables = {
            **{k: v for k, v in self.special_tokens.items() if v is not None},
            **kwargs,
            "tools": tool_schemas(tools, documents),
            "documents": documents,
            "add_generation_prompt": add_generation_prompt,
        }
        rendered = [render(template, chat, variables, continue_final_message) for chat in chats]
        text = rendered if batched else rendered[0]
        if not tokenize:
            return text
        options = {"padding": padding, "truncation": truncation, "max_length": max_length}
        out = self(text, add_special_tokens=False, return_tensors=return_tensors, **options)
        return out if return_dict else out["input_ids"]


# transformers' apply_chat_template options that js does not implement (not template variables)
_UNSUPPORTED_CHAT_OPTIONS = (
    "return_assistant_tokens_mask",
    "sanitize_control_tokens",
    "tokenizer_kwargs",
)
_FORCE_BPE_CLEANUP = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"


def _input_names(config: Mapping[str, Any]) -> tuple[str, ...]:
    """transformers' ``model_input_names`` of the config's ``tokenizer_class``."""
    name = str(config.get("tokenizer_class", "")).removesuffix("Fast")
    bert = name == "FNetTokenizer" or name in BERT_LIKE and name != "DistilBertTokenizer"
    return (
        ("input_ids", "token_type_ids", "attention_mask")
        if bert
        else ("input_ids", "attention_mask")
    )


def _array(rows: list[list[int]], name: str) -> np.ndarray:
    if len({len(row) for row in rows}) > 1:
        raise ValueError(
            f"Tokenizer: {name} rows of different lengths cannot make one array. Fix: "
            "padding=True, or return_tensors=None for lists"
        )
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), -1 if rows else 0)


def _missing_json(files: Mapping[str, bytes]) -> str:
    if "tokenizer.model" in files:
        return (
            "Tokenizer: the folder has a SentencePiece tokenizer.model but no tokenizer.json, "
            "which js reads (the tokenizers library runs it). Fix: write tokenizer.json once with "
            "transformers: AutoTokenizer.from_pretrained(folder).save_pretrained(folder)"
        )
    return (
        "Tokenizer: the folder has no tokenizer.json, so text cannot be tokenized. Fix: pass token "
        "ids, or save a fast tokenizer there (transformers' save_pretrained writes tokenizer.json)"
    )
