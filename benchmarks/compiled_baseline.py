"""The strong open baseline: a gpt-fast-style static-cache decoder under torch.compile (reduce-overhead).

    python benchmarks/compiled_baseline.py --model llama-3.2-1b --batch-sizes 1,64 --prompt-len 512

Written here, not in the product, so that the engine is compared with what a few hundred lines of plain
PyTorch reach: fused QKV and gate/up weights, a static KV cache [batch, kv_heads, max_seq, head_dim] per
layer written with `index_copy_`, attention over the whole cache under a mask taken from `input_pos`, and
one decode step compiled whole and replayed as a CUDA graph. Weights come from polyinfer's loader and the
numerics follow the reference candidate (RMSNorm in float32, rotate-half RoPE), so greedy tokens match the
engine's (tests/bench/test_bench_compiled_baseline.py checks that on the CPU). Prints tok/s and the fraction of the
bandwidth floor: batch x copy bandwidth / bytes of weights a decode step reads.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path
from typing import Any, Protocol

import torch
import torch._inductor.config
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from polyinfer.candidates.reference import rms_norm, rotate_half
from polyinfer.engine.config import parse_dtype
from polyinfer.models.load import LoadedModel, load_model
from polyinfer.models.spec import ModelSpec
from polyinfer.models.weights import LayerWeights

WARMUP_STEPS = 3  # reduce-overhead compiles on the first call, records the CUDA graph on the second


def frozen(t: torch.Tensor) -> nn.Parameter:
    # Parameters, not plain attributes, so that CUDA graphs treat weights as static and never copy them.
    return nn.Parameter(t, requires_grad=False)


class KVCache(nn.Module):
    k: torch.Tensor
    v: torch.Tensor

    def __init__(self, batch: int, kv_heads: int, max_seq: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__()
        shape = (batch, kv_heads, max_seq, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v ([batch, kv_heads, len(input_pos), head_dim]) at `input_pos`; return the whole cache."""
        self.k.index_copy_(2, input_pos, k)
        self.v.index_copy_(2, input_pos, v)
        return self.k, self.v


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, lw: LayerWeights, cache: KVCache) -> None:
        super().__init__()
        self.spec, self.cache = spec, cache
        self.attention_norm, self.ffn_norm = frozen(lw.input_norm), frozen(lw.post_norm)
        self.wqkv = frozen(torch.cat([lw.q_proj, lw.k_proj, lw.v_proj]))
        biases = [b for b in (lw.q_bias, lw.k_bias, lw.v_bias) if b is not None]
        self.bqkv = frozen(torch.cat(biases)) if biases else None
        self.q_norm = frozen(lw.q_norm) if lw.q_norm is not None else None
        self.k_norm = frozen(lw.k_norm) if lw.k_norm is not None else None
        self.wo = frozen(lw.o_proj)
        self.w13 = frozen(torch.cat([lw.gate_proj, lw.up_proj]))
        self.w2 = frozen(lw.down_proj)

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        s = self.spec
        b, t, _ = x.shape
        group, eps = s.num_heads // s.num_kv_heads, s.rms_norm_eps
        qkv = F.linear(rms_norm(x, self.attention_norm, eps), self.wqkv, self.bqkv)
        q, k, v = qkv.split([s.q_size, s.kv_size, s.kv_size], dim=-1)
        q = q.view(b, t, s.num_heads, s.head_dim)
        k = k.view(b, t, s.num_kv_heads, s.head_dim)
        v = v.view(b, t, s.num_kv_heads, s.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = rms_norm(q, self.q_norm, eps), rms_norm(k, self.k_norm, eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k_all, v_all = self.cache.update(input_pos, k.transpose(1, 2), v.transpose(1, 2))
        # As gpt-fast: one query row per head. Under the math backend with coordinate-descent tuning,
        # Inductor turns each one-row bmm into a reduction that reads the cache directly, the repeat and
        # the math backend's float32 upcast fused in; folding a query group into the rows would instead
        # leave a cuBLAS bmm fed by a float32 copy of the whole cache.
        k_all = k_all.repeat_interleave(group, dim=1)
        v_all = v_all.repeat_interleave(group, dim=1)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k_all, v_all, attn_mask=mask)
        o = o.transpose(1, 2).reshape(b, t, s.q_size)
        x = x + F.linear(o, self.wo)
        gate, up = F.linear(rms_norm(x, self.ffn_norm, eps), self.w13).chunk(2, dim=-1)
        return x + F.linear(F.silu(gate) * up, self.w2)


class StaticModel(nn.Module):
    """A decoder for `batch` sequences of at most `max_seq` tokens that advance together."""

    mask: torch.Tensor  # [query position, key position]
    cos: torch.Tensor  # [position, head_dim]
    sin: torch.Tensor

    def __init__(self, loaded: LoadedModel, batch: int, max_seq: int) -> None:
        super().__init__()
        spec, w = loaded.spec, loaded.weights
        dtype, device = w.embed.dtype, w.embed.device
        self.spec = spec
        self.embed, self.norm, self.lm_head = frozen(w.embed), frozen(w.norm), frozen(w.lm_head)
        self.layers = nn.ModuleList(
            Block(spec, lw, KVCache(batch, spec.num_kv_heads, max_seq, spec.head_dim, dtype, device))
            for lw in w.layers
        )
        pos = torch.arange(max_seq, device=device)
        mask = pos[None, :] <= pos[:, None]
        if spec.sliding_window:
            mask &= pos[None, :] > pos[:, None] - spec.sliding_window
        freqs = pos.float()[:, None] * spec.rope.inv_freq(spec.head_dim).to(device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("mask", mask, persistent=False)
        self.register_buffer("cos", emb.cos().to(dtype), persistent=False)
        self.register_buffer("sin", emb.sin().to(dtype), persistent=False)

    @property
    def decode_bytes(self) -> int:
        """Bytes of weights one decode step reads: every layer, the final norm and the LM head (even when
        tied); the embedding rows it gathers are negligible."""
        tensors = [self.norm, self.lm_head, *self.layers.parameters()]
        return sum(t.numel() * t.element_size() for t in tensors)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Logits [batch, vocab] after the last of `tokens` ([batch, len(input_pos)])."""
        x = self.embed[tokens]
        mask = self.mask[input_pos]
        cos, sin = self.cos[input_pos][:, None, :], self.sin[input_pos][:, None, :]
        for layer in self.layers:
            x = layer(x, input_pos, mask, cos, sin)
        return F.linear(rms_norm(x[:, -1], self.norm, self.spec.rms_norm_eps), self.lm_head)


class DecodeFn(Protocol):
    def __call__(self, model: StaticModel, token: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor: ...


def decode_one_token(model: StaticModel, token: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
    return model(token, input_pos).argmax(dim=-1, keepdim=True)


def compiled_decode() -> DecodeFn:
    # Every measurement compiles afresh (a new model is a recompile, and past Dynamo's recompile limit a
    # function silently runs eagerly); dynamic=False keeps one static graph per batch size rather than
    # the symbolic one automatic dynamic shapes would make from the second size on.
    torch._dynamo.reset()
    return torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True, dynamic=False)


@torch.no_grad()
def prefill(model: StaticModel, prompt: torch.Tensor) -> torch.Tensor:
    """Fill the cache with `prompt` ([batch, len]) and return the first greedy token, [batch, 1]."""
    return decode_one_token(model, prompt, torch.arange(prompt.shape[1], device=prompt.device))


@torch.no_grad()
def decode_n_tokens(decode: DecodeFn, model: StaticModel, token: torch.Tensor, input_pos: torch.Tensor,
                    n: int) -> list[torch.Tensor]:
    """`n` greedy steps from `token` at `input_pos` (a one-element tensor, advanced in place)."""
    out = []
    # The math backend lets Inductor generate the attention itself, which gpt-fast found fastest for decode.
    with sdpa_kernel(SDPBackend.MATH):
        for _ in range(n):
            token = decode(model, token, input_pos).clone()  # a CUDA graph's output is overwritten on replay
            input_pos += 1
            out.append(token)
    return out


def random_prompt(vocab_size: int, batch: int, prompt_len: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(seed))


def measure(model_name: str, batch: int, prompt_len: int, steps: int, device: torch.device | str,
            dtype: torch.dtype, compile: bool = True, coordinate_descent: bool = True,
            seed: int = 0) -> dict[str, Any]:
    """Prefill a seeded random prompt, warm up, then time `steps` decode steps.

    `tokens` holds each row's greedy continuation: the prefill's token, the warm-up's, then the timed ones.
    `coordinate_descent` is gpt-fast's Inductor tuning: faster kernels for a longer compile.
    """
    device = torch.device(device)
    # Rounded up, as gpt-fast does: SDPA's fused prefill kernels take mask rows of a multiple of 16 as is.
    max_seq = -(-(prompt_len + WARMUP_STEPS + steps) // 16) * 16
    model = StaticModel(load_model(model_name, dtype=dtype, device=device), batch, max_seq)
    decode = compiled_decode() if compile else decode_one_token

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    token = prefill(model, random_prompt(model.spec.vocab_size, batch, prompt_len, seed).to(device))
    input_pos = torch.tensor([prompt_len], device=device)
    with torch._inductor.config.patch(coordinate_descent_tuning=coordinate_descent):
        sync()
        t0 = time.perf_counter()
        warm = decode_n_tokens(decode, model, token, input_pos, WARMUP_STEPS)
        sync()
        t1 = time.perf_counter()
        timed = decode_n_tokens(decode, model, warm[-1], input_pos, steps)
        sync()
        t2 = time.perf_counter()
    return {"model": model_name, "batch": batch, "prompt_len": prompt_len, "steps": steps,
            "compile": compile, "compile_s": t1 - t0, "decode_s": t2 - t1, "tok_s": batch * steps / (t2 - t1),
            "ms_per_step": (t2 - t1) / steps * 1e3, "weights_bytes": model.decode_bytes,
            "tokens": torch.cat([token, *warm, *timed], dim=1).tolist()}


def copy_bandwidth(device: torch.device) -> float:
    """engine_bench's measurement, loaded from its file because benchmarks/ is not a package."""
    path = Path(__file__).with_name("engine_bench.py")
    spec = importlib.util.spec_from_file_location("engine_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.copy_bandwidth(device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--batch-sizes", default="1,64")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="run the decode step eagerly")
    ap.add_argument("--no-coordinate-descent", dest="coordinate_descent", action="store_false",
                    help="skip Inductor's coordinate-descent tuning: a shorter compile, but slower kernels, "
                    "attention's above all")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = parse_dtype(args.dtype)
    rows = [measure(args.model, int(b), args.prompt_len, args.steps, device, dtype, args.compile,
                    args.coordinate_descent) for b in args.batch_sizes.split(",")]
    bandwidth = copy_bandwidth(device)  # after the decode runs, which its 4 GiB of buffers would disturb
    for r in rows:
        r["fraction_of_floor"] = r["tok_s"] / (r["batch"] * bandwidth / r["weights_bytes"])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    mode = "compiled (reduce-overhead)" if args.compile else "eager"
    print(f"\n{name}  {args.model} {args.dtype}  torch {torch.__version__}  {mode}")
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s   weights read per step "
          f"{rows[0]['weights_bytes'] / 1e9:.3f} GB   prompt {args.prompt_len}, {args.steps} timed steps")
    print(f"{'batch':>5} {'tok/s':>10} {'ms/step':>8} {'compile s':>10} {'% floor':>8}")
    for r in rows:
        print(f"{r['batch']:>5} {r['tok_s']:>10.0f} {r['ms_per_step']:>8.2f} {r['compile_s']:>10.1f} "
              f"{100 * r['fraction_of_floor']:>7.1f}%")
    if args.json_out:
        results = {"model": args.model, "device": name, "dtype": args.dtype, "torch": torch.__version__,
                   "compile": args.compile, "copy_bandwidth_Bps": bandwidth, "decode": rows}
        Path(args.json_out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
