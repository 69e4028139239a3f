"""Sweep the declared knobs of the decode kernels at a model's shapes, against cuBLAS / the defaults.

    python benchmarks/kernel_sweep.py --model llama-3.2-1b --batch-sizes 1,64 --context 512 \\
        --configs 40 --json-out sweep.json

For each projection shape (fused QKV, O, fused gate-up, down, LM head) and batch size: cuBLAS
(`F.linear`), the Triton GEMV with its defaults, and `--configs` random points of `gemv.KNOBS`; for
decode attention: the defaults (automatic splits) and random points of `paged_decode_attention.KNOBS`.
Every point is checked against the reference before it is timed. The operands rotate through enough
copies to exceed the L2 cache, as in a forward pass, where each layer's weights are read once per
step, and are replayed from a CUDA graph (samples of at least 2 ms, CUDA events). Reported: median microseconds
per call and the bandwidth achieved (bytes of weights and KV read per call / time).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from polyinfer.bench.timer import time_calls
from polyinfer.kernels import gemv, paged_decode_attention
from polyinfer.models.presets import preset_spec

L2_BYTES = 256 * 2**20  # rotate operands over more than the L2 (50 MB on an H200), with margin


def timed(fn: Callable[[int], object], device: torch.device, copies: int) -> float:
    """Median microseconds per call of fn(i) over i = 0..copies-1, replayed from one CUDA graph: a
    kernel of a few microseconds launched from Python would time the launch, not the kernel."""
    def every_copy() -> None:
        for i in range(copies):
            fn(i)

    every_copy()  # compile, settle allocations
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        every_copy()
    return statistics.median(time_calls(graph.replay, device, 15, 3)) / copies * 1e6


def points(knobs: dict[str, list[int]], n: int, rng: random.Random) -> list[dict[str, int]]:
    grid = [dict(zip(knobs, values, strict=True)) for values in itertools.product(*knobs.values())]
    return rng.sample(grid, min(n, len(grid)))


def sweep_gemv(name: str, n: int, k: int, m: int, dtype: torch.dtype, device: torch.device, configs: int,
               rng: random.Random) -> dict:
    copies = max(2, -(-L2_BYTES // (n * k * 2)))
    ws = [torch.randn(n, k, device=device, dtype=dtype) / k**0.5 for _ in range(copies)]
    x = torch.randn(m, k, device=device, dtype=dtype)
    want = F.linear(x.float(), ws[0].float())
    row: dict = {"op": name, "n": n, "k": k, "batch": m, "bytes": n * k * 2,
                 "cublas_us": timed(lambda i: F.linear(x, ws[i]), device, copies)}
    row["points"] = sweep_points(gemv.KNOBS, configs, rng, lambda i, kn: gemv.gemv(x, ws[i], **kn), want, device,
                                 copies)
    return finish(row, "cublas_us")


def sweep_points(space: dict[str, list[int]], configs: int, rng: random.Random,
                 call: Callable[[int, dict], torch.Tensor], want: torch.Tensor, device: torch.device,
                 copies: int) -> list[dict]:
    """The defaults and `configs` random points of `space`: each checked against `want` on copy 0,
    then timed; a point the compiler refuses (shared memory, registers) is recorded with its error."""
    out: list[dict] = []
    for knobs in [{}, *points(space, configs, rng)]:
        try:
            err = float((call(0, knobs).float() - want).norm() / want.norm())
            us = timed(lambda i, kn=knobs: call(i, kn), device, copies) if err < 2e-2 else None
        except Exception as e:
            out.append({"knobs": knobs, "error": f"{type(e).__name__}: {str(e)[:120]}"})
            continue
        out.append({"knobs": knobs, "rel_err": err, "us": us})
    return out


def sweep_attention(spec, b: int, context: int, dtype: torch.dtype, device: torch.device, configs: int,
                    rng: random.Random) -> dict:
    block_size = 16
    blocks = b * -(-context // block_size)
    kv_bytes = 2 * b * context * spec.num_kv_heads * spec.head_dim * 2
    copies = max(2, -(-L2_BYTES // kv_bytes))
    caches = [(torch.randn(blocks, block_size, spec.num_kv_heads, spec.head_dim, device=device, dtype=dtype),
               torch.randn(blocks, block_size, spec.num_kv_heads, spec.head_dim, device=device, dtype=dtype))
              for _ in range(copies)]
    tables = torch.randperm(blocks, device=device, dtype=torch.int32).view(b, -1)
    lens = torch.full((b,), context, dtype=torch.int32, device=device)
    q = torch.randn(b, spec.num_heads, spec.head_dim, device=device, dtype=dtype)
    want = paged_decode_attention.reference(q.float(), caches[0][0].float(), caches[0][1].float(), tables, lens)
    def call(i: int, knobs: dict) -> torch.Tensor:
        return paged_decode_attention.paged_decode_attention(q, caches[i][0], caches[i][1], tables, lens, **knobs)

    row: dict = {"op": "decode attention", "batch": b, "context": context, "bytes": kv_bytes,
                 "points": sweep_points(paged_decode_attention.KNOBS, configs, rng, call, want, device, copies)}
    return finish(row, None)


def finish(row: dict, baseline: str | None) -> dict:
    ok = [p for p in row["points"] if p.get("us")]
    row["default_us"] = row["points"][0].get("us")
    best = min(ok, key=lambda p: p["us"]) if ok else None
    row["best"] = best
    ref = row[baseline] if baseline else row["default_us"]
    line = f"{row['op']:>16} b{row['batch']:<3}"
    if baseline:
        line += f" cuBLAS {ref:7.1f} us ({row['bytes'] / ref / 1e3:5.0f} GB/s),"
    if row["default_us"]:
        line += f" default {row['default_us']:7.1f} us,"
    if best:
        line += f" best {best['us']:7.1f} us ({row['bytes'] / best['us'] / 1e3:5.0f} GB/s) {best['knobs']}"
    print(line, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--batch-sizes", default="1,64")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--configs", type=int, default=40, help="random knob points per kernel and shape")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("kernel_sweep needs a CUDA device (the kernels' CPU tests run interpreted)")
    device, dtype = torch.device("cuda"), torch.bfloat16
    spec = preset_spec(args.model)
    h, q, kv = spec.hidden_size, spec.q_size, spec.kv_size
    shapes = [("qkv", q + 2 * kv, h), ("o", h, q), ("gate_up", 2 * spec.intermediate_size, h),
              ("down", h, spec.intermediate_size), ("lm_head", spec.vocab_size, h)]
    rows = []
    t0 = time.perf_counter()
    for b in (int(x) for x in args.batch_sizes.split(",")):  # the same points for every shape: fewer compiles
        rows += [sweep_gemv(name, n, k, b, dtype, device, args.configs, random.Random(args.seed))
                 for name, n, k in shapes]
        rows.append(sweep_attention(spec, b, args.context, dtype, device, args.configs, random.Random(args.seed)))
    print(f"swept in {time.perf_counter() - t0:.0f} s")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"model": args.model, "context": args.context,
                                                   "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                                   "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
