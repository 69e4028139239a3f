"""Tokenizer: text <-> token ids and chat prompts, over a `tokenizers.Tokenizer`.

Read from a checkpoint directory the way transformers reads it (`tokenizer.json` for the model,
`tokenizer_config.json` for special tokens and the chat template, or `chat_template.jinja` as
transformers 5 saves it) or built from GGUF metadata (`gguf_tokenizer.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tokenizers

from polyinfer.errors import ModelError, RequestError
from polyinfer.models.chat_template import ChatTemplate


@dataclass(frozen=True, eq=False)
class Tokenizer:
    backend: tokenizers.Tokenizer
    chat_template: str | None = None  # Jinja source; None when the model has none
    bos_token: str | None = None
    eos_token: str | None = None
    eos_token_ids: tuple[int, ...] = ()  # every id that ends generation (instruct models often have several)
    _template: ChatTemplate | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_template", ChatTemplate(self.chat_template) if self.chat_template else None
        )

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; `add_special_tokens` adds what the model's post-processor adds (e.g. BOS).

        Pass False for text rendered by `apply_chat_template`, which already holds its special tokens.
        """
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        """The prompt text for a conversation, as the model's own template renders it."""
        if self._template is None:
            raise RequestError("this model's tokenizer has no chat template; send a plain prompt instead")
        return self._template.render(
            messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )

    def save(self, directory: Path) -> None:
        """Write `tokenizer.json` and `tokenizer_config.json`, readable by `from_dir` and transformers."""
        self.backend.save(str(directory / "tokenizer.json"))
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "clean_up_tokenization_spaces": False,
            "chat_template": self.chat_template,
        }
        (directory / "tokenizer_config.json").write_text(
            json.dumps(config, indent=2, ensure_ascii=False) + "\n"
        )

    @classmethod
    def from_dir(cls, directory: Path, eos_token_ids: Iterable[int] = ()) -> Tokenizer:
        """Load from a checkpoint directory holding `tokenizer.json`; `eos_token_ids` (from config.json)
        join the EOS token and generation_config.json's ids."""
        try:
            backend = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
        except Exception as e:  # tokenizers raises a bare Exception for malformed files
            raise ModelError(f"cannot read {directory / 'tokenizer.json'}: {e}") from None
        config = _read_json(directory / "tokenizer_config.json")
        template = config.get("chat_template")
        jinja_file = directory / "chat_template.jinja"
        if template is None and jinja_file.exists():
            template = jinja_file.read_text()
        if isinstance(template, list):  # several named templates: transformers uses "default"
            template = {t.get("name"): t.get("template") for t in template}.get("default")
        bos, eos = _token_text(config.get("bos_token")), _token_text(config.get("eos_token"))
        generation = _read_json(directory / "generation_config.json").get("eos_token_id")
        candidates = [backend.token_to_id(eos) if eos else None, *_as_list(generation), *eos_token_ids]
        ids = tuple(dict.fromkeys(int(i) for i in candidates if i is not None))
        return cls(backend, chat_template=template, bos_token=bos, eos_token=eos, eos_token_ids=ids)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ModelError(f"{path} is not valid JSON: {e}") from None
    return value if isinstance(value, dict) else {}


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json spells it: a string, or an AddedToken dict with 'content'."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]
