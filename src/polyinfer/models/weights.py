"""Weights: the tensors of a dense decoder, by role, validated against its ModelSpec.

Loaders produce a state dict with Hugging Face Llama names (`model.layers.{i}.self_attn.q_proj.weight`, ...);
`Weights.from_state_dict` checks every shape against the spec and arranges them for candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

import torch

from polyinfer.errors import ModelError
from polyinfer.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class LayerWeights:
    input_norm: torch.Tensor  # [hidden]
    q_proj: torch.Tensor  # [num_heads*head_dim, hidden]
    k_proj: torch.Tensor  # [num_kv_heads*head_dim, hidden]
    v_proj: torch.Tensor  # [num_kv_heads*head_dim, hidden]
    o_proj: torch.Tensor  # [hidden, num_heads*head_dim]
    post_norm: torch.Tensor  # [hidden]
    gate_proj: torch.Tensor  # [intermediate, hidden]
    up_proj: torch.Tensor  # [intermediate, hidden]
    down_proj: torch.Tensor  # [hidden, intermediate]
    q_bias: torch.Tensor | None = None  # Qwen2
    k_bias: torch.Tensor | None = None
    v_bias: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None  # Qwen3: RMSNorm over head_dim
    k_norm: torch.Tensor | None = None


@dataclass(frozen=True, slots=True)
class Weights:
    embed: torch.Tensor  # [vocab, hidden]
    layers: tuple[LayerWeights, ...]
    norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor  # [vocab, hidden]; the same tensor as `embed` when tied

    @property
    def nbytes(self) -> int:
        """Bytes of distinct weight storage (a tied LM head counts once)."""
        seen: dict[int, int] = {}
        for t in self.tensors():
            seen[t.data_ptr()] = t.numel() * t.element_size()
        return sum(seen.values())

    def tensors(self) -> list[torch.Tensor]:
        out = [self.embed, self.norm, self.lm_head]
        for layer in self.layers:
            out.extend(t for t in (getattr(layer, f.name) for f in fields(layer)) if t is not None)
        return out

    @classmethod
    def from_state_dict(
        cls,
        spec: ModelSpec,
        get: Mapping[str, torch.Tensor] | Callable[[str], torch.Tensor | None],
    ) -> Weights:
        """Build from HF-named tensors for the first `spec.num_layers` layers, checking every shape.

        `get` is a mapping or a function returning None for a missing name, so that loaders can read
        lazily (mmap) and only the tensors actually needed are touched.
        """
        lookup = get.get if isinstance(get, Mapping) else get

        def take(name: str, shape: tuple[int, ...], required: bool = True) -> torch.Tensor | None:
            t = lookup(name)
            if t is None:
                if required:
                    raise ModelError(f"checkpoint has no tensor {name!r} (expected shape {list(shape)})")
                return None
            if tuple(t.shape) != shape:
                raise ModelError(
                    f"tensor {name!r} has shape {list(t.shape)} but the config implies {list(shape)}"
                )
            return t

        h, q, kv, inter, d = spec.hidden_size, spec.q_size, spec.kv_size, spec.intermediate_size, spec.head_dim
        layers = []
        for i in range(spec.num_layers):
            p = f"model.layers.{i}."
            req = {
                "input_norm": ("input_layernorm.weight", (h,)),
                "q_proj": ("self_attn.q_proj.weight", (q, h)),
                "k_proj": ("self_attn.k_proj.weight", (kv, h)),
                "v_proj": ("self_attn.v_proj.weight", (kv, h)),
                "o_proj": ("self_attn.o_proj.weight", (h, q)),
                "post_norm": ("post_attention_layernorm.weight", (h,)),
                "gate_proj": ("mlp.gate_proj.weight", (inter, h)),
                "up_proj": ("mlp.up_proj.weight", (inter, h)),
                "down_proj": ("mlp.down_proj.weight", (h, inter)),
            }
            parts = {k: take(p + n, s) for k, (n, s) in req.items()}
            if spec.qkv_bias:
                parts["q_bias"] = take(p + "self_attn.q_proj.bias", (q,))
                parts["k_bias"] = take(p + "self_attn.k_proj.bias", (kv,))
                parts["v_bias"] = take(p + "self_attn.v_proj.bias", (kv,))
            if spec.qk_norm:
                parts["q_norm"] = take(p + "self_attn.q_norm.weight", (d,))
                parts["k_norm"] = take(p + "self_attn.k_norm.weight", (d,))
            layers.append(LayerWeights(**parts))  # type: ignore[arg-type]
        embed = take("model.embed_tokens.weight", (spec.vocab_size, h))
        norm = take("model.norm.weight", (h,))
        lm_head = None if spec.tie_word_embeddings else take("lm_head.weight", (spec.vocab_size, h), required=False)
        if lm_head is None:
            if not spec.tie_word_embeddings:
                raise ModelError("checkpoint has no 'lm_head.weight' and the config does not tie embeddings")
            lm_head = embed
        assert embed is not None and norm is not None
        return cls(embed=embed, layers=tuple(layers), norm=norm, lm_head=lm_head)
