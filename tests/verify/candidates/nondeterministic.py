"""Adversarial: tiny unseeded noise on the logits, so the same inputs twice differ (like a racy kernel)."""

import torch

from polyinfer.candidates.reference import ReferenceForward


class Noisy(ReferenceForward):
    def __call__(self, batch):
        logits = super().__call__(batch)
        if logits.numel() == 0:  # a prefill chunk that samples nothing
            return logits
        return logits + torch.randn_like(logits) * 1e-6 * logits.abs().amax()


def build(ctx):
    return Noisy(ctx)
