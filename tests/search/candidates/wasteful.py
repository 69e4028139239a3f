"""A test family: the reference forward plus `waste` extra 128x128 matmuls per call, so knob values
differ in speed by a large, known amount while every output stays the reference's."""

import torch

from polyinfer.candidates.reference import ReferenceForward

KNOBS = {"waste": [100, 0, 50]}


class Wasteful(ReferenceForward):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.waste = int(ctx.knobs.get("waste", KNOBS["waste"][0]))
        self.scratch = torch.randn(128, 128, device=ctx.device)

    def __call__(self, batch):
        x = self.scratch
        for _ in range(self.waste):
            x = torch.tanh(x @ self.scratch)
        return super().__call__(batch) + 0 * x.sum()


def build(ctx):
    return Wasteful(ctx)
