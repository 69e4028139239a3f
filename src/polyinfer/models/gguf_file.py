"""GGUF files (llama.cpp's format): metadata -> HF config, tensors dequantized -> HF names and layouts.

Two layout differences from a Hugging Face checkpoint matter:
- GGUF lists a tensor's dimensions fastest-first (`ne[0]` is the row length); gguf-py's reader already
  returns numpy arrays in row-major order, so the HF shape is the reversed GGUF shape.
- llama.cpp's converter permutes the rows of Q and K of `llama`-architecture models so that its
  interleaved ("GPT-J") rotary embedding equals HF's rotate-half one (`LlamaModel.permute` in
  convert_hf_to_gguf.py); `unpermute` undoes that. Qwen2/Qwen3 files keep the HF layout.
Llama 3 RoPE scaling is stored as a `rope_freqs` tensor of per-frequency divisors instead of parameters;
`_rope_config` recovers the parameters and checks that they reproduce the stored divisors.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

from polyinfer.errors import ModelError
from polyinfer.models.fingerprint import fingerprint
from polyinfer.models.gguf_tokenizer import gguf_tokenizer
from polyinfer.models.loaded_model import LoadedModel
from polyinfer.models.spec import ModelSpec, RopeSpec
from polyinfer.models.weights import Weights

GGUF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name: str) -> str | None:
    """The HF name of a GGUF tensor (`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`)."""
    base, _, kind = gguf_name.rpartition(".")
    if base.startswith("blk."):
        _, layer, part = base.split(".", 2)
        return f"model.layers.{layer}.{_LAYER_NAMES[part]}.{kind}" if part in _LAYER_NAMES else None
    return f"{_GLOBAL_NAMES[base]}.{kind}" if base in _GLOBAL_NAMES else None


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's Q/K row permutation: per head, rows (0, d/2, 1, d/2+1, ...) back to HF order."""
    rest = w.shape[1:]
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


class GGUFFile:
    """An open GGUF file (memory-mapped); tensors are dequantized only when asked for."""

    def __init__(self, path: Path) -> None:
        try:
            self.reader = gguf.GGUFReader(path)
        except Exception as e:  # gguf-py raises ValueError, IndexError, struct errors... on bad input
            raise ModelError(f"{path} is not a readable GGUF file: {type(e).__name__}: {e}") from None
        self.path = path
        self.arch = str(self.value("general.architecture"))
        if self.arch not in GGUF_ARCHITECTURES:
            raise ModelError(
                f"GGUF architecture {self.arch!r} in {path} is not supported; supported: "
                f"{', '.join(GGUF_ARCHITECTURES)}"
            )
        self.by_gguf_name = {t.name: t for t in self.reader.tensors}
        self.tensors = {name: t for t in self.reader.tensors if (name := hf_name(t.name))}

    def value(self, key: str, default: Any = None) -> Any:
        field = self.reader.fields.get(key)
        return default if field is None else field.contents()

    def require(self, key: str) -> Any:
        if key not in self.reader.fields:
            raise ModelError(f"GGUF file {self.path} lacks the metadata key {key!r}")
        return self.value(key)

    def hf_config(self) -> dict[str, Any]:
        """The HF `config.json` equivalent of this file's metadata."""
        a = self.arch
        hidden = int(self.require(f"{a}.embedding_length"))
        heads = int(self.require(f"{a}.attention.head_count"))
        head_dim = int(
            self.value(f"{a}.attention.key_length")
            or self.value(f"{a}.rope.dimension_count")
            or hidden // heads
        )
        if int(self.value(f"{a}.rope.dimension_count", head_dim)) != head_dim:
            raise ModelError(
                f"{self.path}: partial rotary embeddings (rope dimension != head_dim) are not supported"
            )
        embed = self.tensors.get("model.embed_tokens.weight")
        if embed is None:
            raise ModelError(f"GGUF file {self.path} has no token_embd.weight tensor")
        ends = [self.value(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
        return {
            "architectures": [GGUF_ARCHITECTURES[a]],
            "vocab_size": int(embed.shape[-1]),
            "hidden_size": hidden,
            "intermediate_size": int(self.require(f"{a}.feed_forward_length")),
            "num_hidden_layers": int(self.require(f"{a}.block_count")),
            "num_attention_heads": heads,
            "num_key_value_heads": int(self.value(f"{a}.attention.head_count_kv", heads)),
            "head_dim": head_dim,
            "rms_norm_eps": _decimal(self.require(f"{a}.attention.layer_norm_rms_epsilon")),
            "max_position_embeddings": int(self.value(f"{a}.context_length", 4096)),
            "tie_word_embeddings": "lm_head.weight" not in self.tensors,
            "bos_token_id": self.value("tokenizer.ggml.bos_token_id"),
            "eos_token_id": list(dict.fromkeys(int(e) for e in ends if e is not None)),
            **self._rope_config(head_dim),
        }

    def _rope_config(self, head_dim: int) -> dict[str, Any]:
        a = self.arch
        theta = _decimal(self.value(f"{a}.rope.freq_base", 10000.0))
        scaling = self.value(f"{a}.rope.scaling.type", "none")
        freqs = self.by_gguf_name.get("rope_freqs.weight")
        if freqs is not None:
            divisors = torch.from_numpy(
                np.array(gguf.quants.dequantize(freqs.data, freqs.tensor_type)).reshape(-1)
            )
            rope = self._llama3_rope(theta, head_dim, divisors)
            scaling_dict = {
                "rope_type": "llama3",
                "factor": rope.factor,
                "low_freq_factor": rope.low_freq_factor,
                "high_freq_factor": rope.high_freq_factor,
                "original_max_position_embeddings": rope.original_max_position_embeddings,
            }
            return {"rope_theta": theta, "rope_scaling": scaling_dict}
        if scaling == "linear":
            factor = float(self.require(f"{a}.rope.scaling.factor"))
            return {"rope_theta": theta, "rope_scaling": {"rope_type": "linear", "factor": factor}}
        if scaling != "none":
            raise ModelError(
                f"{self.path}: RoPE scaling {scaling!r} is not supported (supported: linear, llama3)"
            )
        return {"rope_theta": theta}

    def _llama3_rope(self, theta: float, head_dim: int, divisors: torch.Tensor) -> RopeSpec:
        """Llama 3 scaling parameters that reproduce `divisors` (inv_freq = base inv_freq / divisors).

        llama.cpp stores neither the parameters nor (usually) the original context length. The factor is
        the largest divisor; low/high frequency factors are Llama 3's 1 and 4; the original context
        length comes from the metadata, else from a divisor in the smooth band, else Llama 3's 8192.
        """
        base = RopeSpec(theta=theta).inv_freq(head_dim)
        factor = float(divisors.max())
        candidates = [self.value(f"{self.arch}.rope.scaling.original_context_length")]
        smooth_band = ((divisors > 1) & (divisors < factor)).nonzero()
        if len(smooth_band) and factor > 1:
            i = int(smooth_band[0])
            smooth = (1 / float(divisors[i]) - 1 / factor) / (1 - 1 / factor)
            candidates.append(round(2 * math.pi / float(base[i]) * (3 * smooth + 1)))
        for original in [c for c in candidates if c] + [8192]:
            rope = RopeSpec(
                theta=theta, type="llama3", factor=factor, original_max_position_embeddings=int(original)
            )
            if torch.allclose(rope.inv_freq(head_dim), base / divisors, rtol=1e-4):
                return rope
        raise ModelError(f"{self.path}: the rope_freqs tensor does not match Llama 3 RoPE scaling")

    def tensor(
        self, name: str, spec: ModelSpec, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor | None:
        """The HF-named tensor in HF layout, dequantized into `dtype` on `device`; None if absent."""
        t = self.tensors.get(name)
        if t is None:
            return None
        try:
            values = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise ModelError(
                f"{self.path}: cannot dequantize {t.name} of type {t.tensor_type.name}"
            ) from None
        values = values.reshape(tuple(int(n) for n in reversed(t.shape)))
        if self.arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            values = unpermute(values, spec.num_heads)
        elif self.arch == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            values = unpermute(values, spec.num_kv_heads)
        if not values.flags.writeable:  # a view of the read-only file mapping (F32 tensors)
            values = values.copy()
        return torch.from_numpy(values).to(device).to(dtype)


def _decimal(value: float) -> float:
    """A float32 metadata value as the short decimal it was written from (9.9999997e-06 -> 1e-05)."""
    return float(str(np.float32(value)))


def load_gguf(path: Path, *, dtype: torch.dtype, device: torch.device, num_layers: int | None) -> LoadedModel:
    """Load a GGUF file; only the first `num_layers` layers (all by default) are dequantized."""
    if not path.is_file():
        raise ModelError(f"no GGUF file at {path}")
    file = GGUFFile(path)
    spec = ModelSpec.from_hf_config(file.hf_config(), name=path.stem)
    if num_layers is not None:
        spec = spec.with_layers(num_layers)
    weights = Weights.from_state_dict(spec, lambda name: file.tensor(name, spec, dtype, device))
    tokenizer_meta = {k: file.value(k) for k in file.reader.fields if k.startswith("tokenizer.")}
    return LoadedModel(spec, weights, gguf_tokenizer(tokenizer_meta), str(path), fingerprint([path]))
