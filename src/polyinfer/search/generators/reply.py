"""Reading an LLM's reply: the one candidate module it wrote, and its explanation.

Models wrap code in fenced blocks, sometimes several (a helper shown apart, a revised version after a
first try). The module is the last Python block that defines `build`; without one, the last Python
block, so that screening reports what is wrong with it. The explanation is the prose around the blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_EXPLANATION_CHARS = 2000

_FENCE = re.compile(r"^```[ \t]*([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_DEFINES_BUILD = re.compile(r"^(def\s+build\s*\(|build\s*[:=])", re.MULTILINE)
_PYTHON_TAGS = ("", "python", "py", "python3")


@dataclass(frozen=True, slots=True)
class Reply:
    code: str | None  # None when the reply holds no Python block
    explanation: str


def parse_reply(text: str) -> Reply:
    blocks = [m.group(2) for m in _FENCE.finditer(text) if m.group(1).lower() in _PYTHON_TAGS]
    blocks = [b for b in blocks if b.strip()]
    with_build = [b for b in blocks if _DEFINES_BUILD.search(b)]
    code = (with_build or blocks or [None])[-1]
    prose = re.sub(r"\n{3,}", "\n\n", _FENCE.sub("", text)).strip()
    return Reply(code, prose[:MAX_EXPLANATION_CHARS])
