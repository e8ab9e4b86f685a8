"""Text as it is generated: transformers' ``TextStreamer`` and ``TextIteratorStreamer``.

A streamer receives token ids with ``put`` (the prompt first, then the new tokens as they come)
and ``end()`` when generation stops; it decodes what it holds and hands on the text that can no
longer change (up to the last space, a whole line, or a CJK character) through
``on_finalized_text``, as transformers' streamers do, so a word is never shown half-decoded.
``js.models.pipeline("text-generation")`` takes one as ``streamer=`` (a single prompt).
"""

from __future__ import annotations

import queue
from typing import Any

import numpy as np

__all__ = ["TextIteratorStreamer", "TextStreamer"]

# The CJK blocks transformers' TextStreamer shows character by character (no spaces between words).
_CJK = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)  # fmt: skip


class TextStreamer:
    """Prints generated text to stdout as soon as whole words are formed (transformers'
    ``TextStreamer``); subclass it and override ``on_finalized_text`` to send text elsewhere.

    Args:
        tokenizer: a ``js.models.Tokenizer`` (or anything with ``decode(ids, **options)``).
        skip_prompt: True: the prompt (the first ``put``) is not shown, as for chat replies.
        decode_kwargs: ``tokenizer.decode``'s options (``skip_special_tokens=True``...).

    Example:
        >>> pipe = js.models.pipeline("text-generation", "folder")  # doctest: +SKIP
        >>> streamer = js.models.TextStreamer(pipe.tokenizer, skip_prompt=True)  # doctest: +SKIP
        >>> _ = pipe("Once upon", streamer=streamer, max_new_tokens=20)  # doctest: +SKIP
        a time there was a ...
    """

    def __init__(self, tokenizer: Any, skip_prompt: bool = False, **decode_kwargs: Any):
        self.tokenizer = tokenizer
        self.skip_prompt = skip_prompt
        self.decode_kwargs = decode_kwargs
        self.token_cache: list[int] = []
        self.print_len = 0  # characters of the cache's text already handed on
        self.next_tokens_are_prompt = True

    def put(self, value: Any) -> None:
        """Take token ids (``[n]``, or ``[1, n]``) and hand on the text now final."""
        value = np.asarray(value)
        if value.ndim > 1 and value.shape[0] > 1:
            raise ValueError(
                f"{type(self).__name__}: token ids of {value.shape[0]} rows; a streamer shows "
                "one sequence. Fix: generate one prompt at a time"
            )
        if self.skip_prompt and self.next_tokens_are_prompt:
            self.next_tokens_are_prompt = False
            return
        self.token_cache.extend(value.reshape(-1).tolist())
        text = self.tokenizer.decode(self.token_cache, **self.decode_kwargs)
        if text.endswith("\n"):  # a whole line: hand it on and start afresh
            printable = text[self.print_len :]
            self.token_cache, self.print_len = [], 0
        elif text and _is_cjk(ord(text[-1])):
            printable = text[self.print_len :]
            self.print_len += len(printable)
        else:  # up to the last space: the last word may still change with the next token
            printable = text[self.print_len : text.rfind(" ") + 1]
            self.print_len += len(printable)
        self.on_finalized_text(printable)

    def end(self) -> None:
        """Hand on what the cache still holds, and mark the end of the stream."""
        printable = ""
        if self.token_cache:
            text = self.tokenizer.decode(self.token_cache, **self.decode_kwargs)
            printable = text[self.print_len :]
        self.token_cache, self.print_len = [], 0
        self.next_tokens_are_prompt = True
        self.on_finalized_text(printable, stream_end=True)

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Print ``text`` (a newline after the last piece)."""
        print(text, flush=True, end=None if stream_end else "")


class TextIteratorStreamer(TextStreamer):
    """Text pieces in a queue, read by iterating over the streamer (transformers'
    ``TextIteratorStreamer``): run the generation in a thread and iterate in the caller.

    Args:
        tokenizer, skip_prompt, decode_kwargs: as ``TextStreamer``'s.
        timeout: seconds to wait for each piece (None: wait as long as it takes); a
            ``queue.Empty`` error after that, so a failed generation does not hang the reader.

    Example:
        >>> from threading import Thread
        >>> pipe = js.models.pipeline("text-generation", "folder")  # doctest: +SKIP
        >>> streamer = js.models.TextIteratorStreamer(pipe.tokenizer)  # doctest: +SKIP
        >>> options = {"streamer": streamer, "max_new_tokens": 20}  # doctest: +SKIP
        >>> Thread(target=pipe, args=("Once upon",), kwargs=options).start()  # doctest: +SKIP
        >>> for piece in streamer:  # doctest: +SKIP
        ...     print(piece, end="")
    """

    def __init__(
        self, tokenizer: Any, skip_prompt: bool = False, timeout: float | None = None,
        **decode_kwargs: Any,
    ):  # fmt: skip
        super().__init__(tokenizer, skip_prompt, **decode_kwargs)
        self.text_queue: queue.Queue[str | None] = queue.Queue()
        self.stop_signal = None  # queued after the last piece
        self.timeout = timeout

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Queue ``text`` (then the end signal, after the last piece)."""
        self.text_queue.put(text, timeout=self.timeout)
        if stream_end:
            self.text_queue.put(self.stop_signal, timeout=self.timeout)

    def __iter__(self) -> TextIteratorStreamer:
        return self

    def __next__(self) -> str:
        value = self.text_queue.get(timeout=self.timeout)
        if value is None:  # the stop signal
            raise StopIteration
        return value


def _is_cjk(codepoint: int) -> bool:
    return any(low <= codepoint <= high for low, high in _CJK)
