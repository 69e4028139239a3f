"""Host overhead of engine steps: schedule, build the batch, sample, update, around a forward that
computes nothing, so what is timed is what the engine adds to every step.

    python benchmarks/engine_overhead.py --batch-sizes 1,64 --context 512

On a GPU this work runs while the device waits (the step ends in a blocking copy of the sampled ids),
so it adds to every decode step's time one for one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.engine.sequence import SamplingParams
from polyinfer.models.load import load_model

NOOP = Candidate(
    "import torch\n\n\n"
    "def build(ctx):\n"
    "    def forward(batch):\n"
    "        return torch.zeros(batch.logits_indices.shape[0], ctx.spec.vocab_size, device=ctx.device)\n\n"
    "    return forward\n",
    {},
    "noop",
)


def step_us(model: str, batch: int, context: int, steps: int, device: str) -> float:
    """Median over 5 runs of the mean host time per decode step, in microseconds."""
    engine = Engine(load_model(model, num_layers=1, device=device),
                    EngineConfig(device=device, kv_cache_tokens=batch * (context + 6 * steps + 64),
                                 max_num_seqs=batch))
    engine.swap(NOOP)
    vocab = engine.spec.vocab_size
    for b in range(batch):
        prompt = [(b * 31 + i * 7) % (vocab - 1) + 1 for i in range(context)]
        engine.add_request(prompt, SamplingParams(max_tokens=6 * steps + 8, ignore_eos=True))
    while any(s.in_prefill for s in engine.scheduler.running) or engine.scheduler.waiting:
        engine.step()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(steps):
            engine.step()
        runs.append((time.perf_counter() - t0) / steps * 1e6)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-llama",
                    help="one layer is loaded; a small vocabulary keeps the no-op logits' argmax negligible on a CPU")
    ap.add_argument("--batch-sizes", default="1,64")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [{"batch": b, "host_us_per_step": step_us(args.model, b, args.context, args.steps, args.device)}
            for b in (int(x) for x in args.batch_sizes.split(","))]
    for r in rows:
        print(f"batch {r['batch']:>4}: {r['host_us_per_step']:.0f} us of host work per decode step")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"model": args.model, "context": args.context,
                                                   "device": args.device, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
