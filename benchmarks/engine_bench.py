"""Engine benchmark: cold start vs hot swap, and reference-candidate decode throughput.

    python benchmarks/engine_bench.py --model llama-3.2-1b --device cuda --dtype bfloat16

Prints a table and (with --json-out) the raw numbers. The bandwidth floor is bytes of weights read per
decode step over the copy bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from polyinfer.bench import steps
from polyinfer.bench.timer import time_calls
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.messages import WorkerSpec
from polyinfer.engine.supervisor import EngineProcess


def copy_bandwidth(device: torch.device, gib: float = 2.0) -> float:
    """Bytes read plus written per second for a large device-to-device copy (CPU: memcpy)."""
    n = int(gib * 2**30) // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    t = time_calls(lambda: dst.copy_(src), device, reps=10, warmup=3)
    return 2 * src.numel() * 4 / statistics.median(t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-sizes", default="1,64")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--swaps", type=int, default=5)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    device = torch.device(args.device)
    config = EngineConfig(device=args.device, dtype=args.dtype, kv_cache_tokens=max(batches) * (args.context + 4 * args.steps + 64))
    bandwidth = copy_bandwidth(device)
    results: dict = {"model": args.model, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                     "dtype": args.dtype, "torch": torch.__version__, "copy_bandwidth_Bps": bandwidth}
    with EngineProcess(WorkerSpec(args.model, config)) as proc:
        cold = proc.cold_start
        assert cold is not None and proc.ready is not None
        results["cold_start"] = {"total_s": cold.total_s, "load_s": cold.load_s, "first_forward_s": cold.first_forward_s}
        swaps = []
        for i in range(args.swaps):
            t0 = time.perf_counter()
            report = proc.swap(Candidate.reference().with_knobs({"nonce": i}))
            swaps.append({"wall_s": time.perf_counter() - t0, "import_s": report.import_s,
                          "build_s": report.build_s, "probe_s": report.probe_s})
        results["hot_swap"] = swaps
        weights = proc.ready.weights_bytes
        results["weights_bytes"] = weights
        rows = []
        for b in batches:
            timing = proc.call(steps.time_step, b, args.context, 1, 30, 5, timeout_s=600)
            tok_s = proc.call(steps.engine_decode_tok_s, b, args.context, args.steps, timeout_s=600)
            floor_tok_s = b * bandwidth / weights
            rows.append({"batch": b, "forward_ms": timing.median_s * 1e3, "forward_cv": timing.cv,
                         "forward_tok_s": b / timing.median_s, "engine_tok_s": tok_s,
                         "floor_tok_s": floor_tok_s, "fraction_of_floor": tok_s / floor_tok_s})
        results["decode"] = rows
    swap_med = statistics.median(s["wall_s"] for s in swaps)
    print(f"\n{results['device']}  {args.model} {args.dtype}  torch {torch.__version__}")
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s   weights {weights / 1e9:.2f} GB")
    print(f"cold start {cold.total_s:.2f} s (load {cold.load_s:.2f} s, first forward {cold.first_forward_s:.2f} s)"
          f"   hot swap median {swap_med * 1e3:.1f} ms   ratio {cold.total_s / swap_med:.0f}x")
    print(f"{'batch':>5} {'fwd ms':>8} {'cv':>6} {'fwd tok/s':>10} {'engine tok/s':>13} {'% floor':>8}")
    for r in rows:
        print(f"{r['batch']:>5} {r['forward_ms']:>8.2f} {r['forward_cv']:>6.3f} {r['forward_tok_s']:>10.0f} "
              f"{r['engine_tok_s']:>13.0f} {100 * r['fraction_of_floor']:>7.1f}%")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
