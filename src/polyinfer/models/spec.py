"""ModelSpec: the shape and hyper-parameters of one dense decoder, read from an HF `config.json`."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from polyinfer.errors import ModelError

SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True, slots=True)
class RopeSpec:
    theta: float = 10000.0
    type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.type not in SUPPORTED_ROPE_TYPES:
            raise ModelError(
                f"RoPE scaling type {self.type!r} is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
            )

    def inv_freq(self, head_dim: int) -> torch.Tensor:
        """Inverse frequencies (float32, length head_dim/2) after the configured scaling."""
        inv = 1.0 / (self.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        if self.type == "linear":
            return inv / self.factor
        if self.type == "llama3":
            low_wavelen = self.original_max_position_embeddings / self.low_freq_factor
            high_wavelen = self.original_max_position_embeddings / self.high_freq_factor
            wavelen = 2 * math.pi / inv
            scaled = torch.where(wavelen > low_wavelen, inv / self.factor, inv)
            smooth = (self.original_max_position_embeddings / wavelen - self.low_freq_factor) / (
                self.high_freq_factor - self.low_freq_factor
            )
            smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
            medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
            return torch.where(medium, smoothed, scaled)
        return inv


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Everything about a model's shape that a forward pass needs. Validated on construction."""

    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope: RopeSpec = field(default_factory=RopeSpec)
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "max_position_embeddings"):
            if getattr(self, name) <= 0:
                raise ModelError(f"config value {name}={getattr(self, name)} must be positive")
        if self.num_heads % self.num_kv_heads:
            raise ModelError(
                f"num_attention_heads={self.num_heads} is not a multiple of num_key_value_heads={self.num_kv_heads}"
            )
        if self.head_dim % 2:
            raise ModelError(f"head_dim={self.head_dim} must be even for rotary embeddings")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def with_layers(self, k: int) -> ModelSpec:
        """The spec of the first k layers (the fast tier's truncated model)."""
        if not 1 <= k <= self.num_layers:
            raise ModelError(f"cannot take the first {k} layers of a {self.num_layers}-layer model")
        fields = {f: getattr(self, f) for f in self.__dataclass_fields__}
        fields["num_layers"] = k
        return ModelSpec(**fields)

    def parameter_count(self) -> int:
        attn = self.hidden_size * (self.q_size + 2 * self.kv_size) + self.q_size * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size
        embed = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * (attn + mlp) + embed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_hf_config(self) -> dict[str, Any]:
        """An HF `config.json` (transformers 4.x keys, which 5.x also reads) that `from_hf_config` maps
        back to this spec, apart from `name`."""
        arch = {family: arch for arch, family in SUPPORTED_ARCHITECTURES.items()}[self.family]
        eos = list(self.eos_token_ids)
        config: dict[str, Any] = {
            "architectures": [arch],
            "model_type": self.family,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope.theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
        }
        if self.rope.type != "default":
            config["rope_scaling"] = {
                "rope_type": self.rope.type,
                "factor": self.rope.factor,
                "low_freq_factor": self.rope.low_freq_factor,
                "high_freq_factor": self.rope.high_freq_factor,
                "original_max_position_embeddings": self.rope.original_max_position_embeddings,
            }
        # Written even when None: transformers' MistralConfig would otherwise default to a 4096 window.
        config["sliding_window"] = self.sliding_window
        config["use_sliding_window"] = self.sliding_window is not None
        return config

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], name: str = "") -> ModelSpec:
        archs = config.get("architectures") or []
        arch = archs[0] if archs else _arch_from_model_type(config.get("model_type"))
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelError(
                f"architecture {arch!r} is not supported; polyinfer supports the Llama family of dense "
                f"decoders: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        family = SUPPORTED_ARCHITECTURES[arch]
        try:
            hidden = int(config["hidden_size"])
            heads = int(config["num_attention_heads"])
            spec = cls(
                family=family,
                vocab_size=int(config["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(config["intermediate_size"]),
                num_layers=int(config["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(config.get("num_key_value_heads") or heads),
                head_dim=int(config.get("head_dim") or hidden // heads),
                rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
                rope=_rope_from_config(config),
                max_position_embeddings=int(config.get("max_position_embeddings", 4096)),
                tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                qkv_bias=family == "qwen2",
                qk_norm=family == "qwen3",
                sliding_window=_sliding_window(config, family),
                bos_token_id=config.get("bos_token_id"),
                eos_token_ids=_as_tuple(config.get("eos_token_id")),
                name=name,
            )
        except KeyError as e:
            raise ModelError(f"config.json is missing the required key {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise ModelError(f"config.json has a value of the wrong type: {e}") from None
        for flag in ("attention_bias", "mlp_bias"):
            if config.get(flag) and family in ("llama", "mistral"):
                # HF then adds biases to o_proj (or the MLP) too, which this engine's weights do not carry.
                raise ModelError(f"{arch} configs with {flag}=true are not supported")
        return spec

    @classmethod
    def from_config_file(cls, path: Path, name: str = "") -> ModelSpec:
        try:
            config = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ModelError(f"no config.json at {path}") from None
        except json.JSONDecodeError as e:
            raise ModelError(f"{path} is not valid JSON: {e}") from None
        if not isinstance(config, dict):
            raise ModelError(f"{path} does not hold a JSON object")
        return cls.from_hf_config(config, name=name)


def _arch_from_model_type(model_type: str | None) -> str:
    by_type = {v: k for k, v in SUPPORTED_ARCHITECTURES.items()}
    return by_type.get(model_type or "", f"<model_type {model_type!r}>")


def _rope_from_config(config: dict[str, Any]) -> RopeSpec:
    # transformers 5 writes `rope_parameters` (theta inside); 4.x writes `rope_theta` + `rope_scaling`.
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
    rope_type = str(params.get("rope_type", params.get("type", "default")))
    return RopeSpec(
        theta=theta,
        type=rope_type,
        factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(params.get("original_max_position_embeddings", 8192)),
    )


def _sliding_window(config: dict[str, Any], family: str) -> int | None:
    window = config.get("sliding_window")
    if family in ("qwen2", "qwen3") and not config.get("use_sliding_window", False):
        return None
    return int(window) if window else None


def _as_tuple(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(int(v) for v in value)
    return (int(value),)
