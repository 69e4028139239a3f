"""Adversarial: skips the middle decoder layer (faster, and wrong)."""

import dataclasses

from polyinfer.candidates.reference import ReferenceForward


def build(ctx):
    layers = ctx.weights.layers
    middle = len(layers) // 2
    weights = dataclasses.replace(ctx.weights, layers=layers[:middle] + layers[middle + 1 :])
    return ReferenceForward(dataclasses.replace(ctx, weights=weights))
