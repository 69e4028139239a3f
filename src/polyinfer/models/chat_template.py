"""ChatTemplate: a model's Jinja chat template, rendered the way transformers renders it.

Templates come from downloaded files, so they run in Jinja's immutable sandbox. The environment matches
transformers' (`trim_blocks`, `lstrip_blocks`, loop controls, `raise_exception`, `strftime_now`, a
`tojson` that keeps non-ASCII text) so that a prompt renders to the same string here as there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from polyinfer.errors import ModelError, RequestError


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled template; `render` turns chat messages into the prompt text the model was tuned on."""

    def __init__(self, source: str) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ModelError(f"the model's chat template does not parse: {e} (line {e.lineno})") from None
        self.source = source

    def render(
        self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True, **variables: Any
    ) -> str:
        """Render `messages` ({"role", "content"} dicts); `variables` such as bos_token reach the template.

        A message list the template rejects (e.g. roles out of order) raises RequestError.
        """
        for m in messages:
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
                raise RequestError(f"a chat message must be a dict with a string 'role'; got {m!r}")
        try:
            return self._template.render(
                messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt, **variables
            )
        except jinja2.TemplateError as e:
            raise RequestError(f"the chat template rejected the messages: {e}") from None
