"""Adversarial: attention in bfloat16 on a float32 model, numerically sloppy beyond the tolerance."""

from polyinfer.candidates.reference import ReferenceForward


class Bf16Attention(ReferenceForward):
    def attention(self, q, k_cache, v_cache, batch):
        low = super().attention(q.bfloat16(), k_cache.bfloat16(), v_cache.bfloat16(), batch)
        return low.to(q.dtype)


def build(ctx):
    return Bf16Attention(ctx)
