"""Greedy decoding with a transformers model by plain argmax: no logits processors, no EOS handling."""

from __future__ import annotations

import torch
import transformers


@torch.no_grad()
def hf_greedy(model: transformers.PreTrainedModel, prompt: list[int], n: int) -> list[int]:
    out = model(torch.tensor([prompt]), use_cache=True)
    tokens = [int(out.logits[0, -1].argmax())]
    for _ in range(n - 1):
        out = model(torch.tensor([[tokens[-1]]]), past_key_values=out.past_key_values, use_cache=True)
        tokens.append(int(out.logits[0, -1].argmax()))
    return tokens
