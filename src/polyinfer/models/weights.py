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

# `LayerWeights` field -> HF tensor name under `model.layers.{i}.`
LAYER_TENSOR_NAMES = {
    "input_norm": "input_layernorm.weight",
    "q_proj": "self_attn.q_proj.weight",
    "k_proj": "self_attn.k_proj.weight",
    "v_proj": "self_attn.v_proj.weight",
    "o_proj": "self_attn.o_proj.weight",
    "post_norm": "post_attention_layernorm.weight",
    "gate_proj": "mlp.gate_proj.weight",
    "up_proj": "mlp.up_proj.weight",
    "down_proj": "mlp.down_proj.weight",
    "q_bias": "self_attn.q_proj.bias",
    "k_bias": "self_attn.k_proj.bias",
    "v_bias": "self_attn.v_proj.bias",
    "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight",
}


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

        layers = []
        for i in range(spec.num_layers):
            parts = {
                role: take(f"model.layers.{i}.{LAYER_TENSOR_NAMES[role]}", shape)
                for role, shape in layer_shapes(spec).items()
            }
            layers.append(LayerWeights(**parts))  # type: ignore[arg-type]
        h = spec.hidden_size
        embed = take("model.embed_tokens.weight", (spec.vocab_size, h))
        norm = take("model.norm.weight", (h,))
        lm_head = None if spec.tie_word_embeddings else take("lm_head.weight", (spec.vocab_size, h), required=False)
        if lm_head is None:
            if not spec.tie_word_embeddings:
                raise ModelError("checkpoint has no 'lm_head.weight' and the config does not tie embeddings")
            lm_head = embed
        assert embed is not None and norm is not None and lm_head is not None
        return cls(embed=embed, layers=tuple(layers), norm=norm, lm_head=lm_head)

    def to_state_dict(self) -> dict[str, torch.Tensor]:
        """HF-named tensors, the inverse of `from_state_dict`; a tied LM head is left out, as HF saves it."""
        out = {"model.embed_tokens.weight": self.embed}
        for i, layer in enumerate(self.layers):
            for f in fields(layer):
                t = getattr(layer, f.name)
                if t is not None:
                    out[f"model.layers.{i}.{LAYER_TENSOR_NAMES[f.name]}"] = t
        out["model.norm.weight"] = self.norm
        if self.lm_head is not self.embed:
            out["lm_head.weight"] = self.lm_head
        return out


def layer_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """`LayerWeights` field -> shape, for the fields this spec uses (QKV biases, QK norms only when set)."""
    h, q, kv, inter, d = spec.hidden_size, spec.q_size, spec.kv_size, spec.intermediate_size, spec.head_dim
    shapes = {
        "input_norm": (h,),
        "q_proj": (q, h),
        "k_proj": (kv, h),
        "v_proj": (kv, h),
        "o_proj": (h, q),
        "post_norm": (h,),
        "gate_proj": (inter, h),
        "up_proj": (inter, h),
        "down_proj": (h, inter),
    }
    if spec.qkv_bias:
        shapes |= {"q_bias": (q,), "k_bias": (kv,), "v_bias": (kv,)}
    if spec.qk_norm:
        shapes |= {"q_norm": (d,), "k_norm": (d,)}
    return shapes


def tensor_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """HF name -> shape of every tensor the first `spec.num_layers` layers need; no LM head when tied."""
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (spec.vocab_size, spec.hidden_size)}
    for i in range(spec.num_layers):
        for role, shape in layer_shapes(spec).items():
            out[f"model.layers.{i}.{LAYER_TENSOR_NAMES[role]}"] = shape
    out["model.norm.weight"] = (spec.hidden_size,)
    if not spec.tie_word_embeddings:
        out["lm_head.weight"] = (spec.vocab_size, spec.hidden_size)
    return out
