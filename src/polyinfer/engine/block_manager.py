"""BlockManager: hands out KV pool blocks, takes them back, and (optionally) shares full prompt blocks.

With prefix caching, a full block is identified by a hash chained over every token up to its end, so a
hit implies the whole prefix matches. Freed blocks keep their hash until they are handed out again, so a
later request can revive them.
"""

from __future__ import annotations

from collections import OrderedDict

from polyinfer.engine.sequence import Sequence


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False) -> None:
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.ref_count = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}  # chained hash -> block
        # Free blocks in least-recently-freed order; OrderedDict gives O(1) revival of a cached block.
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free)

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        total = -(-(seq.num_computed + num_tokens) // self.block_size)
        return max(0, total - len(seq.block_table))

    def can_grow(self, seq: Sequence, num_tokens: int) -> bool:
        return self.blocks_needed(seq, num_tokens) <= self.num_free

    def grow(self, seq: Sequence, num_tokens: int) -> None:
        """Give `seq` blocks for `num_tokens` more tokens beyond those computed; caller checked can_grow."""
        for _ in range(self.blocks_needed(seq, num_tokens)):
            seq.block_table.append(self._take())

    def match_prefix(self, seq: Sequence) -> None:
        """At admission: reuse cached full blocks of the prompt; always leaves one token to compute."""
        if not self.prefix_caching:
            return
        h = 0
        for i in range((len(seq) - 1) // self.block_size):
            h = self._chain(h, seq.tokens[i * self.block_size : (i + 1) * self.block_size])
            block = self.cached.get(h)
            if block is None:
                break
            if self.ref_count[block] == 0:
                del self.free[block]
            self.ref_count[block] += 1
            seq.block_table.append(block)
            seq.block_hashes.append(h)
        seq.num_computed = seq.num_cached = len(seq.block_table) * self.block_size

    def register_full_blocks(self, seq: Sequence) -> None:
        """After a step: publish the hashes of the sequence's newly completed blocks."""
        if not self.prefix_caching:
            return
        tokens = seq.tokens
        for i in range(len(seq.block_hashes), seq.num_computed // self.block_size):
            prev = seq.block_hashes[-1] if seq.block_hashes else 0
            h = self._chain(prev, tokens[i * self.block_size : (i + 1) * self.block_size])
            seq.block_hashes.append(h)
            block = seq.block_table[i]
            if self.block_hash[block] is None and h not in self.cached:
                self.block_hash[block] = h
                self.cached[h] = block

    def release(self, seq: Sequence) -> None:
        for block in reversed(seq.block_table):
            self.ref_count[block] -= 1
            if self.ref_count[block] == 0:
                self.free[block] = None
        seq.block_table = []
        seq.block_hashes = []
        seq.num_computed = 0

    def free_blocks(self) -> list[int]:
        return list(self.free)

    def _take(self) -> int:
        block, _ = self.free.popitem(last=False)
        old = self.block_hash[block]
        if old is not None:
            del self.cached[old]
            self.block_hash[block] = None
        self.ref_count[block] = 1
        return block

    @staticmethod
    def _chain(prev: int, tokens: list[int]) -> int:
        return hash((prev, *tokens))
