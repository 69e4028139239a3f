"""Model specs and weights: HF safetensors directories, GGUF files and seeded presets."""
