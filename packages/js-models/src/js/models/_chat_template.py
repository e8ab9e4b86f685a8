"""Chat templates as transformers 5 finds and renders them: where a folder keeps them
(``read_templates``), which one a call uses (``pick_template``) and Jinja in transformers' sandbox
(``render``; transformers/utils/chat_template_utils.py). jinja2 is imported on first use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any


def pick_template(templates: str | dict[str, str] | None, name: str | None, tools: Any) -> str:
    """transformers' ``get_chat_template``."""
    if isinstance(templates, dict):
        if name is None:
            name = "tool_use" if tools is not None and "tool_use" in templates else "default"
            if name not in templates:
                raise ValueError(
                    "Tokenizer.apply_chat_template: the folder has several chat templates and no "
                    f"default. Fix: chat_template= one of {sorted(templates)}"
                )
        return templates.get(name, name)
    if name is not None:
        return name
    if templates is None:
        raise ValueError(
            "Tokenizer.apply_chat_template: the folder has no chat template (the chat_template "
            "of tokenizer_config.json, or chat_template.jinja). Fix: pass chat_template="
        )
    return templates


def read_templates(
    files: Mapping[str, bytes], config: Mapping[str, Any]
) -> str | dict[str, str] | None:
    """The folder's chat template(s), where transformers 5 finds them: ``chat_template.jinja`` and
    ``additional_chat_templates/NAME.jinja`` first, then ``chat_template.json``, then the config's
    ``chat_template`` (a string, or a list of ``{"name", "template"}``)."""
    named = {
        n[len("additional_chat_templates/") : -6]: v.decode() for n, v in files.items() if "/" in n
    }
    if "chat_template.jinja" in files:
        named["default"] = files["chat_template.jinja"].decode()
    if not named:
        given = config.get("chat_template")
        if "chat_template.json" in files:
            given = json.loads(files["chat_template.json"])["chat_template"]
        if isinstance(given, list):
            return {t["name"]: t["template"] for t in given}
        return given
    return named["default"] if list(named) == ["default"] else named


def tool_schemas(tools: Any, documents: Any) -> list[dict[str, Any]] | None:
    """The tools as the template sees them (JSON schemas), documents checked, as transformers."""
    if documents is not None and not all(isinstance(d, Mapping) for d in documents):
        raise TypeError(
            "Tokenizer.apply_chat_template: documents must be dicts (with 'title' and 'text'). "
            "Fix: pass a list of dicts"
        )
    if tools is None:
        return None
    if not all(isinstance(tool, Mapping) for tool in tools):
        raise TypeError(
            "Tokenizer.apply_chat_template: tools must be JSON schemas (dicts); functions are not "
            "converted. Fix: pass each tool's schema ({'type': 'function', 'function': {...}})"
        )
    return [dict(tool) for tool in tools]


def render(template: str, chat: Any, variables: Mapping[str, Any], continue_final: bool) -> str:
    """transformers' ``render_jinja_template`` of one chat (messages without None values) with
    ``variables`` (tools, documents, add_generation_prompt, special tokens...)."""
    chat = [{k: v for k, v in dict(m).items() if v is not None} for m in chat]
    tag = "CONTINUE_FINAL_MESSAGE_TAG "
    final = ""
    if continue_final:
        final = chat[-1].get("content")
        if not isinstance(final, str):
            raise ValueError(
                "Tokenizer.apply_chat_template: continue_final_message needs the last message's "
                "content as a string. Fix: pass a text content"
            )
        chat[-1] = {**chat[-1], "content": final + tag}
    rendered = _compile(template).render(messages=chat, **variables)
    if not continue_final:
        return rendered
    if final.strip() not in rendered or tag.strip() not in rendered:
        raise ValueError(
            "Tokenizer.apply_chat_template: continue_final_message is set but the template drops "
            "the final message. Fix: check the template and the message"
        )
    at = rendered.rindex(tag.strip())
    return rendered[:at] if rendered[at : at + len(tag)] == tag else rendered[:at].rstrip()


_COMPILED: dict[str, Any] = {}


def _compile(template: str) -> Any:
    if template not in _COMPILED:
        _COMPILED[template] = _chat_environment().from_string(template)
    return _COMPILED[template]


def _chat_environment() -> Any:
    """transformers' chat template sandbox: an ``ImmutableSandboxedEnvironment`` with
    ``trim_blocks``/``lstrip_blocks``, loop controls, a ``{% generation %}`` tag (rendered as its
    body), ``tojson`` without HTML escaping, ``raise_exception`` and ``strftime_now``."""
    try:
        import jinja2  # pyright: ignore[reportMissingImports]
        import jinja2.ext  # pyright: ignore[reportMissingImports]
        import jinja2.nodes  # pyright: ignore[reportMissingImports]
        from jinja2.sandbox import ImmutableSandboxedEnvironment  # pyright: ignore[reportMissingImports]
    except ImportError:
        raise ImportError(
            "Tokenizer.apply_chat_template needs jinja2, which is not installed. "
            'Fix: pip install "js-models[text]"'
        ) from None

    class Generation(jinja2.ext.Extension):
        tags = {"generation"}  # noqa: RUF012 (jinja's API)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return env
