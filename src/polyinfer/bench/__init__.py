"""Measurement: step timings (fast tier), trace replay (full tier) and the statistics that compare them."""
