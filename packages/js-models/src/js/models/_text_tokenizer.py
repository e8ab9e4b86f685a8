"""Text to token ids for a sentence-transformers Transformer module: its folder's
``tokenizer.json`` run by the ``tokenizers`` library (transformers' own tokenizer backend) with
the settings transformers' fast tokenizer applies for sentence-transformers. ``tokenizers`` is
imported on first use, so token ids work without it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


class TextTokenizer:
    """A Transformer module's tokenizer files, kept as read (``save`` writes them back), and
    their ``tokenizer.json`` run as transformers' fast tokenizer runs it for sentence-transformers:
    special tokens added, rows padded to the longest on ``padding_side``, truncated to
    ``max_length`` on ``truncation_side`` (None: no limit).

    Args:
        files: file name -> contents (``tokenizer.json``, ``tokenizer_config.json``, ...).
        max_length: the Transformer module's ``max_seq_length``.
        lowercase: ``do_lower_case``: lowercase first, unless the normalizer has a
            ``Lowercase`` step.
    """

    def __init__(self, files: Mapping[str, bytes], max_length: int | None, lowercase: bool):
        self.files = dict(files)
        self.max_length = max_length
        self.lowercase = lowercase
        self._backend: Any = None

    def settings(self) -> dict[str, Any]:
        """``special_tokens_map.json`` updated by ``tokenizer_config.json``."""
        names = ("special_tokens_map.json", "tokenizer_config.json")
        return {k: v for n in names for k, v in json.loads(self.files.get(n, b"{}")).items()}

    def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """``input_ids``, ``token_type_ids`` and ``attention_mask`` ``[N, L]`` of ``texts``."""
        rows = self.backend().encode_batch(list(texts))
        if len({len(row.ids) for row in rows}) > 1:  # padding is on only with a pad token
            raise ValueError(
                "SentenceTransformer: the tokenizer has no pad_token (tokenizer_config.json), "
                "so texts of different lengths cannot share a batch. Fix: encode with "
                "batch_size=1, or set pad_token"
            )
        return {
            "input_ids": np.array([row.ids for row in rows]),
            "token_type_ids": np.array([row.type_ids for row in rows]),
            "attention_mask": np.array([row.attention_mask for row in rows]),
        }

    def prompt_length(self, prompt: str) -> int:
        """The tokens ``prompt`` takes at the start of a row, special tokens before it included
        and a closing special token not, as sentence-transformers counts them."""
        backend = self.backend()
        ids = backend.encode(prompt).ids
        special = {i for i, token in backend.get_added_tokens_decoder().items() if token.special}
        return len(ids) - int(bool(ids) and ids[-1] in special)

    def backend(self) -> Any:
        """The ``tokenizers.Tokenizer``, built on first use."""
        if self._backend is None:
            self._backend = self._build()
        return self._backend

    def _build(self) -> Any:
        try:
            import tokenizers  # pyright: ignore[reportMissingImports]
        except ImportError:
            raise ImportError(
                "SentenceTransformer: encoding text needs the tokenizers library (transformers' "
                "tokenizer backend), which is not installed. Fix: pip install tokenizers, or "
                "pass token ids: encode({'input_ids': ids, 'attention_mask': mask})"
            ) from None
        if "tokenizer.json" not in self.files:
            raise FileNotFoundError(
                "SentenceTransformer: the Transformer module's folder has no tokenizer.json, so "
                "text cannot be tokenized. Fix: pass token ids, or save a fast tokenizer there "
                "(transformers' save_pretrained writes tokenizer.json)"
            )
        backend = tokenizers.Tokenizer.from_str(self.files["tokenizer.json"].decode())
        if self.lowercase:
            _lowercase_first(backend, tokenizers.normalizers)
        settings = self.settings()
        if self.max_length is None:
            backend.no_truncation()
        else:
            side = settings.get("truncation_side", "right")
            backend.enable_truncation(self.max_length, direction=side)
        pad = settings.get("pad_token")
        pad = pad.get("content") if isinstance(pad, dict) else pad  # an AddedToken's record
        pad_id = None if pad is None else backend.token_to_id(pad)
        if pad_id is None:
            backend.no_padding()
        else:
            side = settings.get("padding_side", "right")
            backend.enable_padding(direction=side, pad_id=pad_id, pad_token=pad)
        return backend

    def save(self, folder: Path) -> None:
        """Write the files back into ``folder``."""
        for name, data in self.files.items():
            (folder / name).write_bytes(data)


def _lowercase_first(backend: Any, normalizers: Any) -> None:
    """sentence-transformers' ``do_lower_case``: a ``Lowercase`` step before the normalizer's
    own, unless it has one (``BertNormalizer(lowercase=True)`` does not count, as there)."""
    first = backend.normalizer
    if first is None:
        steps = []
    else:
        steps = list(first) if isinstance(first, normalizers.Sequence) else [first]
    if not any(isinstance(step, normalizers.Lowercase) for step in steps):
        backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), *steps])
