"""Where a candidate's decode step spends its time, per kernel (CUDA) or operator (CPU).

    python benchmarks/forward_profile.py --model llama-3.2-1b --device cuda --dtype bfloat16 \\
        --batch-sizes 1,64 --candidate "fast:fuse_qkv=true:...:cuda_graphs=true" --json-out profile.json

`bench.profile.profile_step` at each batch size (decode, one token per sequence, context `--context`):
the forward runs `--calls` times under torch.profiler after warm-up, each kernel's device time and
launches divided by the calls. The step time from CUDA events outside the profiler is printed beside
the kernels' sum: the difference is time the device spent between kernels.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from polyinfer.bench.profile import profile_step
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.models.load import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--candidate", default="reference", help="built-in name or file, with :knob=value settings")
    ap.add_argument("--batch-sizes", default="1,64")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    config = EngineConfig(device=args.device, dtype=args.dtype, kv_cache_tokens=max(batches) * (args.context + 64))
    engine = Engine(load_model(args.model, device=args.device, dtype=config.torch_dtype), config)
    candidate = Candidate.parse(args.candidate)
    rows = [profile_step(engine, candidate, b, args.context, args.calls) for b in batches]
    for r in rows:
        print(f"\n{r.table(args.top)}\n({len(r.ops)} ops, {sum(op.calls_per_step for op in r.ops):.0f} calls per step)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"model": args.model, "candidate": args.candidate,
                                                   "device": args.device, "dtype": args.dtype,
                                                   "rows": [dataclasses.asdict(r) for r in rows]}, indent=2))


if __name__ == "__main__":
    main()
