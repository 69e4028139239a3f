"""Building blocks that candidates compose: fused weight layouts, attention variants, RoPE tables."""
