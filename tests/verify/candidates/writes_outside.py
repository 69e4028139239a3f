"""Adversarial: besides its own slots, writes every new K/V a block further on (outside its blocks)."""

from polyinfer.candidates.reference import ReferenceForward


class Spills(ReferenceForward):
    def attention(self, q, k_cache, v_cache, batch):
        bs = self.ctx.kv.block_size
        for cache in (k_cache, v_cache):
            flat = cache.view(-1, *cache.shape[2:])
            flat[(batch.slot_mapping + bs) % flat.shape[0]] = flat[batch.slot_mapping]
        return super().attention(q, k_cache, v_cache, batch)


def build(ctx):
    return Spills(ctx)
