"""Batch-1 decode as a chain of the library's kernels, with and without programmatic dependent launch.

    python benchmarks/layer_chain.py --model llama-3.2-1b --context 512 --configs 12 --json-out chain.json

Every layer of the model at batch 1, as the `fast` family runs it (RMSNorm + residual, fused QKV,
RoPE + paged-KV write, flash-decoding attention, O, RMSNorm + residual, fused gate-up, SiLU-and-multiply,
down), then the final norm and the LM head, on random weights of the model's shapes, replayed from one
CUDA graph (CUDA events, median of samples of at least 2 ms). Variants:

- `cublas`: cuBLAS projections, Triton glue (the family's seed);
- `cublas+pdl`: the same with the glue launched with PDL (a cuBLAS kernel between two Triton kernels
  breaks the programmatic edge);
- `gemv`, `gemv+pdl`: every projection through the Triton GEMV at the family's default tiles;
- `tuned+pdl`, `tuned`: the GEMV's tiles picked per projection (coordinate descent over `--configs`
  random points of `gemv.KNOBS` plus whole-row tiles, each point timed inside the whole chain with PDL),
  then the same tiles without PDL.

Each variant's logits are checked against the `cublas` variant's before it is timed. Reported: median
microseconds per step, and the weights' bandwidth (bytes of weights / step time).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from polyinfer.bench.timer import time_calls
from polyinfer.candidates.blocks.ops import Linear
from polyinfer.kernels import gemv, paged_decode_attention, rms_norm, rope_kv_write, silu_mul
from polyinfer.models.presets import preset_spec

PROJECTIONS = ("qkv", "o", "gate_up", "down")
BLOCK_SIZE = 16


class Chain:
    """One model's weights, KV pool and buffers; `step(tiles, pdl)` runs one batch-1 decode step."""

    def __init__(self, model: str, context: int, dtype: torch.dtype, device: torch.device, seed: int) -> None:
        spec = preset_spec(model)
        self.spec, self.device = spec, device
        g = torch.Generator(device=device).manual_seed(seed)

        def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)

        h, q, kv, inter = (
            spec.hidden_size,
            spec.num_heads * spec.head_dim,
            spec.num_kv_heads * spec.head_dim,
            spec.intermediate_size,
        )
        self.sizes = (q, kv, kv)
        self.layers = [
            {
                "ln1": 1 + rand(h, scale=0.1),
                "ln2": 1 + rand(h, scale=0.1),
                "qkv": rand(q + 2 * kv, h, scale=h**-0.5),
                "o": rand(h, q, scale=q**-0.5),
                "gate_up": rand(2 * inter, h, scale=h**-0.5),
                "down": rand(h, inter, scale=inter**-0.5),
            }
            for _ in range(spec.num_layers)
        ]
        self.final_norm = 1 + rand(h, scale=0.1)
        self.lm_head = rand(spec.vocab_size, h, scale=h**-0.5)
        self.weight_bytes = sum(w.numel() * w.element_size() for layer in self.layers for w in layer.values())
        self.weight_bytes += self.lm_head.numel() * self.lm_head.element_size()
        blocks = -(-(context + 1) // BLOCK_SIZE)
        kv_shape = (spec.num_layers, blocks, BLOCK_SIZE, spec.num_kv_heads, spec.head_dim)
        self.k_cache, self.v_cache = rand(*kv_shape, scale=0.5), rand(*kv_shape, scale=0.5)
        self.block_table = torch.arange(blocks, device=device, dtype=torch.int32)[None]
        self.seq_lens = torch.tensor([context + 1], device=device, dtype=torch.int32)
        self.positions = torch.tensor([context], device=device)
        self.slots = torch.tensor([context], device=device)
        inv_freq = 1.0 / (
            spec.rope.theta ** (torch.arange(0, spec.head_dim, 2, device=device).float() / spec.head_dim)
        )
        self.cos, self.sin = rope_kv_write.rope_tables(inv_freq, context + 1)
        self.x = rand(1, h)

    def linear(self, x: torch.Tensor, w: torch.Tensor, tiles: dict | None, pdl: bool) -> torch.Tensor:
        return F.linear(x, w) if tiles is None else gemv.gemv(x, w, **tiles, pdl=pdl)

    def step(self, tiles: dict[str, dict | None], pdl: bool) -> torch.Tensor:
        spec, eps = self.spec, self.spec.rms_norm_eps
        x, residual = self.x, torch.zeros_like(self.x)
        for i, layer in enumerate(self.layers):
            normed, residual = rms_norm.rms_norm(x, layer["ln1"], eps, residual, pdl=pdl)
            qkv = self.linear(normed, layer["qkv"], tiles["qkv"], pdl)
            q, k, v = qkv.split(self.sizes, dim=1)
            q = rope_kv_write.rope_kv_write(
                q.view(1, spec.num_heads, spec.head_dim),
                k.view(1, spec.num_kv_heads, spec.head_dim),
                v.view(1, spec.num_kv_heads, spec.head_dim),
                self.positions,
                self.slots,
                self.cos,
                self.sin,
                self.k_cache[i],
                self.v_cache[i],
                pdl=pdl,
            )
            attn = paged_decode_attention.paged_decode_attention(
                q, self.k_cache[i], self.v_cache[i], self.block_table, self.seq_lens, pdl=pdl
            )
            o = self.linear(attn.view(1, -1), layer["o"], tiles["o"], pdl)
            normed, residual = rms_norm.rms_norm(o, layer["ln2"], eps, residual, pdl=pdl)
            gate_up = self.linear(normed, layer["gate_up"], tiles["gate_up"], pdl)
            x = self.linear(silu_mul.silu_mul(gate_up, pdl=pdl), layer["down"], tiles["down"], pdl)
        normed, _ = rms_norm.rms_norm(x, self.final_norm, eps, residual, pdl=pdl)
        return F.linear(normed, self.lm_head)


def replayed(
    fn: Callable[[], torch.Tensor], device: torch.device
) -> tuple[Callable[[], object], torch.Tensor]:
    """fn captured in a CUDA graph (on CUDA), with its output; on a CPU, fn itself."""
    out = fn()  # compile, settle allocations
    if device.type != "cuda":
        return fn, out
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph.replay, out


def measure(
    chain: Chain, tiles: dict[str, dict | None], pdl: bool, want: torch.Tensor | None, reps: int
) -> dict:
    try:
        run, out = replayed(lambda: chain.step(tiles, pdl), chain.device)
    except Exception as exc:  # a tile the compiler refuses (registers, shared memory)
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    run()
    if want is not None:
        err = ((out.float() - want.float()).abs().max() / want.float().abs().max()).item()
        if err > 0.05:
            return {"error": f"logits differ from cuBLAS's by {err:.3g} of their largest"}
    us = statistics.median(time_calls(run, chain.device, reps, 3)) * 1e6
    return {
        "us": round(us, 1),
        "weights_tb_s": round(chain.weight_bytes / (us * 1e-6) / 1e12, 3),
        "tiles": tiles,
        "pdl": pdl,
    }


def default_tiles(chain: Chain) -> dict[str, dict]:
    """The `fast` family's Triton projections: 32x256 tiles, K split as its `Linear` splits it."""
    linear = Linear("triton", 32, 256, chain.device)
    return {
        name: {"BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": linear.split_k(*chain.layers[0][name].shape)}
        for name in PROJECTIONS
    }


def candidates(k: int, configs: int, rng: random.Random) -> list[dict]:
    """Random points of the GEMV's tile knobs, plus tiles that hold a whole row slice (read before the wait)."""
    space = {
        "BLOCK_N": [4, 8, 16, 32, 64],
        "BLOCK_K": [256, 512, 1024, 2048],
        "SPLIT_K": [1, 2, 4],
        "num_warps": [4, 8, 16],
        "num_stages": [1, 3],
    }
    grid = [dict(zip(space, v, strict=True)) for v in itertools.product(*space.values())]
    grid = [p for p in grid if p["BLOCK_K"] * p["SPLIT_K"] <= k and p["BLOCK_N"] * p["BLOCK_K"] <= 32768]
    whole = [p for p in grid if p["BLOCK_K"] * p["SPLIT_K"] == k and p["num_stages"] == 1]
    rest = [p for p in grid if p not in whole]
    return rng.sample(whole, min(configs, len(whole))) + rng.sample(rest, min(configs, len(rest)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument(
        "--configs",
        type=int,
        default=12,
        help="random tile points per projection (and as many whole-row ones)",
    )
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    chain = Chain(args.model, args.context, dtype, device, args.seed)
    rng = random.Random(args.seed)
    cublas = dict.fromkeys(PROJECTIONS)
    rows: dict[str, dict] = {}
    rows["cublas"] = measure(chain, cublas, False, None, args.reps)
    run, want = replayed(lambda: chain.step(cublas, False), device)
    run()
    rows["cublas+pdl"] = measure(chain, cublas, True, want, args.reps)
    base = default_tiles(chain)
    rows["gemv"] = measure(chain, base, False, want, args.reps)
    rows["gemv+pdl"] = measure(chain, base, True, want, args.reps)
    tiles, best = dict(base), rows["gemv+pdl"].get("us", float("inf"))
    tried = []
    for name in PROJECTIONS:
        k = chain.layers[0][name].shape[1]
        for point in candidates(k, args.configs, rng):
            trial = {**tiles, name: point}
            row = measure(chain, trial, True, want, args.reps)
            tried.append(
                {"projection": name, "point": point, **{k: v for k, v in row.items() if k != "tiles"}}
            )
            if row.get("us", float("inf")) < best:
                tiles, best = trial, row["us"]
        print(f"{name}: {tiles[name]} -> {best:.1f} us", flush=True)
    rows["tuned+pdl"] = measure(chain, tiles, True, want, args.reps)
    rows["tuned"] = measure(chain, tiles, False, want, args.reps)
    base_us = rows["cublas"]["us"]
    print(f"{args.model}, batch 1, context {args.context}, {chain.weight_bytes / 1e9:.3f} GB of weights")
    print(f"{'variant':12s} {'us/step':>9s} {'TB/s':>6s} {'vs cublas':>9s}")
    for name, row in rows.items():
        if "us" in row:
            print(f"{name:12s} {row['us']:9.1f} {row['weights_tb_s']:6.2f} {base_us / row['us']:8.3f}x")
        else:
            print(f"{name:12s} {row['error']}")
    if args.json_out:
        out = {
            "model": args.model,
            "context": args.context,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__,
            "weight_bytes": chain.weight_bytes,
            "variants": rows,
            "tried": tried,
        }
        Path(args.json_out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
