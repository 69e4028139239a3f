"""Adversarial: rescales the model's final norm in place at build time. The reference reads the same
weights, so every comparison with it still agrees; only the weights checksum can see it."""

from polyinfer.candidates.reference import ReferenceForward


def build(ctx):
    ctx.weights.norm.mul_(1.5)
    return ReferenceForward(ctx)
