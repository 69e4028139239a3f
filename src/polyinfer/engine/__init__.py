"""The persistent engine: resident weights, a paged KV pool, a continuous-batching scheduler and
a forward pass that hot-swaps (a candidate)."""
