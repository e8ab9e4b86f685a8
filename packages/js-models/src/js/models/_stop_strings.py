"""Stop strings: transformers' ``StopStringCriteria``, checked on the host between runs of the
decode loop (every ``STOP_CHUNK`` new tokens)."""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from ._generation_request import OWNER, _Request


class _Run(Protocol):
    """What the stop strings read and end of a run of the decode loop (``_generation._Run``)."""

    out: jax.Array  # [B, slots] the new tokens so far
    finished: jax.Array  # [B] bool
    count: int
    done: bool

    def tokens(self, start: int = 0) -> np.ndarray: ...


STOP_CHUNK = 8  # new tokens between two checks of the stop strings


class _StopStrings:
    """transformers' ``StopStringCriteria`` on the host, between runs of the decode loop: a
    row ends at the first new token whose text completes a stop string (an occurrence in the
    decoded text of the prompt's real tokens and the new ones that overlaps that token's text);
    the tokens the loop made after it become padding."""

    def __init__(self, strings: Any, tokenizer: Any, request: _Request):
        strings = [strings] if isinstance(strings, str) else list(strings)
        if not strings or not all(isinstance(t, str) and t for t in strings):
            raise TypeError(f"{OWNER}: stop_strings must be a non-empty string or strings")
        if not callable(getattr(tokenizer, "decode", None)):
            raise TypeError(
                f"{OWNER}: stop_strings needs tokenizer= (anything with decode(ids), such as "
                f"js.models.Tokenizer), got {tokenizer!r}"
            )
        if request.beams > 1:
            raise NotImplementedError(f"{OWNER}: stop_strings with beam search is not supported")
        self.strings, self.decode, self.request = strings, tokenizer.decode, request
        P = request.prompt.shape[1]
        real = request.mask[:, -P:] == 1
        self.prompts = [list(p[m]) for p, m in zip(request.prompt, real, strict=True)]
        self.ends = np.full(len(self.prompts), -1)  # each row's last new token (-1: running)
        self.checked = 0

    def _stops_at(self, row: Any, tokens: np.ndarray, j: int) -> bool:
        before = self.decode([int(t) for t in [*self.prompts[row], *tokens[:j]]])
        text = self.decode([int(t) for t in [*self.prompts[row], *tokens[: j + 1]]])
        return any(s in text[max(len(before) - len(s) + 1, 0) :] for s in self.strings)

    def check(self, run: _Run) -> bool:
        """Look at the tokens made since the last check, end the rows that stop (on the
        device too); True when the generation is over."""
        tokens, eos = run.tokens(), set(self.request.eos.tolist())
        for row in np.flatnonzero(self.ends < 0):
            for j in range(self.checked, run.count):
                if tokens[row, j] in eos or self._stops_at(row, tokens[row], j):
                    self.ends[row] = j
                    break
        self.checked = run.count
        stopped = self.ends >= 0
        if stopped.any():
            slot = np.arange(run.out.shape[1])
            after = stopped[:, None] & (slot[None, :] > self.ends[:, None])
            run.out = jnp.where(after, self.request.pad, run.out)
            run.finished = jnp.asarray(stopped) | run.finished
        return bool(stopped.all()) or run.done

    def tokens(self, run: _Run) -> np.ndarray:
        """The new tokens up to the last row's end."""
        last = np.where(self.ends >= 0, self.ends, run.count - 1)
        return run.tokens()[:, : int(last.max()) + 1]
