"""The ``text-generation`` task of ``js.models.pipeline``: prompts or chats in, generated text out,
through ``js.models.generate``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import js

from ._generation import generate, stream
from ._pipeline_base import Pipeline

# transformers' text-generation pipeline defaults, for what neither the call nor the folder's
# generation_config.json sets.
# (GenerationConfig's top_k=50 among them; js.models.generate's own default is no limit).
_GENERATION_DEFAULTS = {"max_new_tokens": 256, "do_sample": True, "temperature": 0.7, "top_k": 50}
_SAMPLING = ("temperature", "top_k")


class TextGeneration(Pipeline):
    """``[{"generated_text"}]`` for each prompt: a string, or chat messages (``[{"role",
    "content"}]``) rendered with the folder's chat template, the reply appended as an assistant
    message. ``return_full_text`` (default True) keeps the prompt; ``seed`` (default 0) seeds
    sampling; the other options are ``generate``'s, where neither they nor the folder's
    generation config say, transformers' pipeline defaults: ``max_new_tokens=256``,
    ``do_sample=True``, ``temperature=0.7``, ``top_k=50``. Prompts of a batch are left-padded.
    ``streamer`` (a ``js.models.TextStreamer`` or ``TextIteratorStreamer``, or any object with
    ``put(ids)`` and ``end()``) is given the prompt's ids, then each new token as it comes, then
    ``end()``, as transformers' ``generate`` does; it takes one prompt (not a list)."""

    task = "text-generation"

    def single(self, inputs: Any) -> bool:
        return super().single(inputs) or bool(inputs) and isinstance(inputs[0], dict)  # a chat

    def __call__(self, inputs: Any, **options: Any) -> Any:
        result = super().__call__(inputs, **options)
        return [result] if self.single(inputs) else [[r] for r in result]

    def run(self, items: list[Any], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        keep = ("return_full_text", "skip_special_tokens", "streamer")
        settings = {k: v for k, v in options.items() if k not in keep}
        streamer = options.get("streamer")
        if streamer is not None and len(items) != 1:
            raise ValueError(
                f"pipeline('text-generation'): a streamer shows one sequence, and {len(items)} "
                "prompts were given. Fix: call the pipeline on one prompt at a time"
            )
        seed = settings.pop("seed", 0)
        folder = self.model.generation_config
        blocked = {*folder, *(["max_new_tokens"] if "max_length" in settings else [])}
        defaults = {k: v for k, v in _GENERATION_DEFAULTS.items() if k not in blocked}
        settings = {**defaults, **settings}
        if settings.get("do_sample", folder.get("do_sample")):
            settings["rngs"] = js.Rngs(sample=seed)
        else:  # transformers drops its sampling defaults when not sampling
            settings = {k: v for k, v in settings.items() if k in options or k not in _SAMPLING}
        pad = self.tokenizer.pad_token_id or 0
        for start in range(0, len(items), self.batch_size):
            prompts = items[start : start + self.batch_size]
            rows = [self.preprocess(prompt)["input_ids"] for prompt in prompts]
            width = max(map(len, rows))
            ids = np.array([[pad] * (width - len(r)) + r for r in rows], np.int32)
            mask = np.array([[0] * (width - len(r)) + [1] * len(r) for r in rows], np.int32)
            if streamer is None:
                out = np.asarray(generate(self.model, ids, attention_mask=mask, **settings))
                out = out[:, width:]
            else:
                chunks = stream(self.model, ids, attention_mask=mask, **settings)  # checked
                out = _streamed(streamer, ids, chunks)
            for prompt, tokens in zip(prompts, out, strict=True):
                yield {"prompt": prompt, "new": tokens}

    def preprocess(self, item: Any) -> dict[str, Any]:
        if isinstance(item, str):
            return dict(self.tokenizer(item, return_tensors=None))
        final = item[-1]["role"] == "assistant"
        return self.tokenizer.apply_chat_template(
            item, add_generation_prompt=not final, continue_final_message=final
        )

    def postprocess(
        self, row: dict[str, Any], *, return_full_text: bool = True, skip_special_tokens=True,
        **options: Any,
    ) -> Any:  # fmt: skip
        text = self.tokenizer.decode(row["new"], skip_special_tokens=skip_special_tokens)
        prompt = row["prompt"]
        if not return_full_text:
            return {"generated_text": text}
        if isinstance(prompt, str):
            return {"generated_text": prompt + text}
        if prompt[-1]["role"] == "assistant":
            last = {**prompt[-1], "content": prompt[-1]["content"] + text}
            return {"generated_text": [*prompt[:-1], last]}
        return {"generated_text": [*prompt, {"role": "assistant", "content": text}]}


def _streamed(streamer: Any, prompt: np.ndarray, chunks: Any) -> np.ndarray:
    """The new tokens ``[1, n]`` of ``js.models.stream``'s chunks (of one prompt ``[1, L]``),
    given to ``streamer.put`` as transformers' ``generate`` does: the prompt, then each token."""
    streamer.put(prompt)
    new = []
    for chunk in chunks:
        for token in chunk[0]:
            streamer.put(token[None])
            new.append(token)
    streamer.end()
    return np.array([new], np.int32)


PIPELINES = (TextGeneration,)
