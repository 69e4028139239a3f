"""Built-in candidates: source modules loaded by the engine through the candidate contract."""
