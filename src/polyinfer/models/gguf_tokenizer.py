"""Rebuild a byte-level BPE tokenizer from GGUF metadata, as llama.cpp would tokenize with it.

A GGUF file carries no `tokenizer.json`: only the vocabulary, the merges, per-token types and the name of
the pre-tokenizer (`tokenizer.ggml.pre`), which selects the regex that splits text before BPE. The
regexes below are the ones llama.cpp (llama-vocab.cpp) and the models' own tokenizer.json files use.
A vocabulary of another kind, or an unknown pre-tokenizer, yields no tokenizer (with a warning) rather
than one that silently splits text differently from the model's training.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as Backend

from polyinfer.models.tokenizer import Tokenizer

log = logging.getLogger(__name__)

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Pre-tokenizers that split with their own regex; Llama 3's BPE also takes a whole word found in the
# vocabulary before applying merges (`ignore_merges`), and Qwen2 normalizes to NFC first.
_SPLITS = {
    "llama-bpe": _LLAMA3_SPLIT,
    "llama3": _LLAMA3_SPLIT,
    "smaug-bpe": _LLAMA3_SPLIT,
    "falcon3": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT,
    "deepseek-r1-qwen": _QWEN2_SPLIT,
}
# Pre-tokenizers that use GPT-2's regex, some after isolating every digit (StarCoder-style vocabularies).
_GPT2 = ("gpt-2",)
_GPT2_DIGITS = ("smollm", "starcoder", "refact", "codeshell")
SUPPORTED_PRE_TOKENIZERS = (*_SPLITS, *_GPT2, *_GPT2_DIGITS)

_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp's token types


def gguf_tokenizer(meta: Mapping[str, Any]) -> Tokenizer | None:
    """The tokenizer described by `tokenizer.*` metadata, or None where it is not byte-level BPE."""
    kind = meta.get("tokenizer.ggml.model")
    pre = str(meta.get("tokenizer.ggml.pre", "gpt-2"))
    if kind != "gpt2":
        log.warning("GGUF tokenizer %r is not byte-level BPE; loading the model without a tokenizer", kind)
        return None
    if pre not in SUPPORTED_PRE_TOKENIZERS:
        log.warning(
            "GGUF pre-tokenizer %r is unknown (known: %s); loading the model without a tokenizer",
            pre,
            ", ".join(SUPPORTED_PRE_TOKENIZERS),
        )
        return None
    tokens = [str(t) for t in meta["tokenizer.ggml.tokens"]]
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    backend = Backend(models.BPE(vocab, merges, ignore_merges=_SPLITS.get(pre) == _LLAMA3_SPLIT))
    backend.pre_tokenizer = _pre_tokenizer(pre)
    if _SPLITS.get(pre) == _QWEN2_SPLIT:
        backend.normalizer = normalizers.NFC()
    backend.decoder = decoders.ByteLevel()
    types = list(meta.get("tokenizer.ggml.token_type") or [])
    backend.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t, kind_ in zip(tokens, types, strict=False)
            if kind_ == _USER_DEFINED
        ]
    )
    backend.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, kind_ in zip(tokens, types, strict=False)
            if kind_ == _CONTROL
        ]
    )

    def special(key: str) -> tuple[str, int] | None:
        i = meta.get(f"tokenizer.ggml.{key}")
        return (tokens[int(i)], int(i)) if i is not None and 0 <= int(i) < len(tokens) else None

    bos, eos = special("bos_token_id"), special("eos_token_id")
    _add_template(
        backend,
        bos if meta.get("tokenizer.ggml.add_bos_token") else None,
        eos if meta.get("tokenizer.ggml.add_eos_token") else None,
    )
    ends = [t[1] for t in (eos, special("eot_token_id"), special("eom_token_id")) if t is not None]
    return Tokenizer(
        backend,
        chat_template=meta.get("tokenizer.chat_template"),
        bos_token=bos[0] if bos else None,
        eos_token=eos[0] if eos else None,
        eos_token_ids=tuple(dict.fromkeys(ends)),
    )


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    if pre in _SPLITS:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_SPLITS[pre]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _GPT2_DIGITS:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    return byte_level


def _add_template(backend: Backend, bos: tuple[str, int] | None, eos: tuple[str, int] | None) -> None:
    """Add BOS/EOS on `encode(add_special_tokens=True)` where the file asks for it."""
    if bos is None and eos is None:
        return
    head, tail = [bos[0]] if bos else [], [eos[0]] if eos else []
    backend.post_processor = processors.TemplateProcessing(
        single=" ".join([*head, "$A", *tail]),
        pair=" ".join([*head, "$A", *tail, *head, "$B:1", *tail]),
        special_tokens=list(dict.fromkeys(t for t in (bos, eos) if t is not None)),
    )
