"""Text to token ids for a sentence-transformers Transformer module: its folder's ``Tokenizer``
(``tokenizer.py``) run with the settings sentence-transformers gives transformers' tokenizer
(pad to the longest, truncate to ``max_seq_length``, ``do_lower_case``). The ``Tokenizer`` is
built on first use, so token ids work without the ``tokenizers`` library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .tokenizer import Tokenizer, import_tokenizers, read_config, write_files


class TextTokenizer:
    """A Transformer module's tokenizer files, kept as read (``save`` writes them back), run as
    sentence-transformers runs transformers' tokenizer: special tokens added, rows padded to the
    longest on ``padding_side``, cut to ``max_length`` on ``truncation_side`` (None: no limit).

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
        self._tokenizer: Tokenizer | None = None

    def settings(self) -> dict[str, Any]:
        """``special_tokens_map.json`` updated by ``tokenizer_config.json``."""
        return read_config(self.files)

    def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """``input_ids``, ``token_type_ids`` and ``attention_mask`` ``[N, L]`` of ``texts``."""
        tokenizer = self.tokenizer()
        padding = tokenizer.pad_token_id is not None  # padding is on only with a pad token
        rows = tokenizer(
            list(texts), padding=padding, truncation=self.max_length is not None,
            max_length=self.max_length, return_tensors=None,
            return_token_type_ids=True, return_attention_mask=True,
        )  # fmt: skip
        if len({len(row) for row in rows["input_ids"]}) > 1:
            raise ValueError(
                "SentenceTransformer: the tokenizer has no pad_token (tokenizer_config.json), "
                "so texts of different lengths cannot share a batch. Fix: encode with "
                "batch_size=1, or set pad_token"
            )
        return {
            name: np.array(rows[name]) for name in ("input_ids", "token_type_ids", "attention_mask")
        }

    def prompt_length(self, prompt: str) -> int:
        """The tokens ``prompt`` takes at the start of a row, special tokens before it included
        and a closing special token not, as sentence-transformers counts them."""
        tokenizer = self.tokenizer()
        limit = self.max_length
        ids = tokenizer.encode(prompt, truncation=limit is not None, max_length=limit)
        backend = tokenizer.backend
        special = {i for i, token in backend.get_added_tokens_decoder().items() if token.special}
        return len(ids) - int(bool(ids) and ids[-1] in special)

    def tokenizer(self) -> Tokenizer:
        """The ``Tokenizer`` of the files, built on first use."""
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self.files)
            if self.lowercase:
                _lowercase_first(self._tokenizer.backend)
        return self._tokenizer

    def save(self, folder: Path) -> None:
        """Write the files back into ``folder``."""
        write_files(self.files, folder)


def _lowercase_first(backend: Any) -> None:
    """sentence-transformers' ``do_lower_case``: a ``Lowercase`` step before the normalizer's
    own, unless it has one (``BertNormalizer(lowercase=True)`` does not count, as there)."""
    normalizers = import_tokenizers().normalizers
    first = backend.normalizer
    if first is None:
        steps = []
    else:
        steps = list(first) if isinstance(first, normalizers.Sequence) else [first]
    if not any(isinstance(step, normalizers.Lowercase) for step in steps):
        backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), *steps])
