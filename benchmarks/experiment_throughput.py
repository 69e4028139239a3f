"""Experiment throughput: the persistent engine's swap path against a fresh process per experiment.

    python benchmarks/experiment_throughput.py --model llama-3.1-8b --device cuda --dtype bfloat16

The model is saved once as a safetensors checkpoint on local disk; both paths then load it from there.
On CUDA the candidates are the reference and seven CUDA-graph variants of `fast` (what a search there
proposes); on a CPU, eager `fast` variants; with `--mix`, the candidates a real study measured. Each
experiment is: get the candidate running, then one short measurement (median decode-step time at
batch 1 and 8, 20 calls each). The fresh path starts a process, loads the checkpoint, builds and warms
the candidate, measures, and exits; the swap path keeps one worker and only swaps. A candidate whose
build fails (a real study's mix has them) ends its experiment there, on both paths. Same candidates,
same device, one run, paired: each candidate's fresh experiment, then its swap, and the JSON rewritten
after every pair (a run cut off by a time limit keeps the pairs it finished, with their ratios).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from polyinfer.bench.steps import time_step
from polyinfer.engine.candidate import Candidate, declared_seeds
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.engine.messages import WorkerSpec
from polyinfer.engine.supervisor import EngineProcess, WorkerFailure
from polyinfer.models.checkpoint import save_checkpoint
from polyinfer.models.load import load_model


def measure(engine: Engine) -> dict[str, float]:
    return {f"decode_b{b}_ms": time_step(engine, b, 256, 1, reps=20, warmup=3).median_s * 1e3 for b in (1, 8)}


def candidates(device: str) -> list[Candidate]:
    """A study's mix: the reference, then `fast` variants; on CUDA the kind a search proposes there (the
    family's seed, CUDA-graph replay with Triton kernels, and one-knob changes of it)."""
    fast = Candidate.builtin("fast")
    if not device.startswith("cuda"):
        return [Candidate.reference(), fast, fast.with_knobs({"decode_attention": "batched"}),
                fast.with_knobs({"fuse_qkv": True, "fuse_gate_up": True}), fast.with_knobs({"rope": "table"})]
    seed = fast.with_knobs(declared_seeds(fast)[0])
    changes = [{}, {"linear": "triton"}, {"prefill_attention": "loop"}, {"norm": "torch"}, {"rope_kv": "torch"},
               {"activation": "torch"}, {"fuse_qkv": False}]
    return [Candidate.reference(), *(seed.with_knobs(c) for c in changes)]


def study_mix(path: str, limit: int | None, skip_failed: bool) -> list[Candidate]:
    """The candidates a real study tried, in its order, from `polyinfer status STUDY --json`, those whose
    build failed included unless `skip_failed`: a fresh process pays its start and the checkpoint
    before a build can fail, the swap path only the build, and a study counts both as experiments."""
    records = [c for c in json.loads(Path(path).read_text())["candidates"]
               if not (skip_failed and c["state"] == "failed")]
    return [Candidate.builtin(c["name"], c["knobs"]) for c in records[:limit]]


def experiment(proc: EngineProcess, cand: Candidate, t0: float) -> dict:
    """Swap `cand` in and measure it; a failed build ends the experiment there (`failed`)."""
    try:
        report = proc.swap(cand)
    except WorkerFailure as e:
        return {"candidate": cand.label, "seconds": time.perf_counter() - t0, "failed": str(e)[:200]}
    ready = time.perf_counter() - t0
    numbers = proc.call(measure)
    return {"candidate": cand.label, "seconds": time.perf_counter() - t0, "ready_s": ready,
            "swap_s": report.total_s, **numbers}


def progress(path: str, done: int, total: int, row: dict) -> None:
    """Print one finished experiment, so a long run shows where it is."""
    what = f"build failed: {row['failed'][:60]}" if "failed" in row else f"ready in {row['ready_s']:.3f} s"
    print(f"{path:>5} {done + 1:>3}/{total} {row['candidate']:<28} {row['seconds']:7.2f} s  {what}", flush=True)


def summarize(fresh: list[dict], swapped: list[dict], start_s: float) -> dict:
    """The ratios over the pairs run so far. Fresh experiments count until their process has exited;
    the swap path's total includes its worker's one start."""
    fresh_total = sum(f["wall_s"] for f in fresh)
    swap_total = start_s + sum(s["seconds"] for s in swapped)
    n = len(fresh)
    result: dict = {"pairs": n, "fresh_total_s": fresh_total, "swap_total_s": swap_total,
                    "experiments_per_hour": {"fresh": 3600 * n / fresh_total, "swap": 3600 * n / swap_total,
                                             "ratio": fresh_total / swap_total},
                    "failed_builds": sum("failed" in s for s in swapped)}
    # Time to first measurement and to readiness are over the experiments that measured something.
    measured = [(f, s) for f, s in zip(fresh, swapped, strict=True) if "failed" not in f and "failed" not in s]
    if measured:
        first = [statistics.median(row["seconds"] for row in side) for side in zip(*measured, strict=True)]
        ready = [statistics.median(row["ready_s"] for row in side) for side in zip(*measured, strict=True)]
        result["time_to_first_measurement"] = {"fresh_s": first[0], "swap_s": first[1], "ratio": first[0] / first[1]}
        # The part before measuring can start (fresh: process, checkpoint, build; swap path: the swap).
        result["time_to_ready"] = {"fresh_s": ready[0], "swap_s": ready[1], "ratio": ready[0] / ready[1]}
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--kv-cache-tokens", type=int, default=16384)
    ap.add_argument("--dir", default=None, help="where to save the checkpoint (default: a temp dir)")
    ap.add_argument("--mix", help="a real study's candidates: the output of `polyinfer status STUDY --json`")
    ap.add_argument("--limit", type=int, help="only the first N candidates of --mix")
    ap.add_argument("--skip-failed", action="store_true", help="leave out the candidates of --mix that failed")
    ap.add_argument("--json-out", help="written after every pair of experiments, so a cut-off run keeps them")
    args = ap.parse_args()
    config = EngineConfig(device=args.device, dtype=args.dtype, kv_cache_tokens=args.kv_cache_tokens)
    root = Path(args.dir or tempfile.mkdtemp(prefix="polyinfer-ckpt-"))
    t0 = time.perf_counter()
    preset = load_model(args.model, dtype=config.torch_dtype, device=args.device)
    ckpt = save_checkpoint(preset, root / args.model)
    size = preset.weights.nbytes
    del preset
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    save_s = time.perf_counter() - t0
    spec = WorkerSpec(str(ckpt), config)
    mix = study_mix(args.mix, args.limit, args.skip_failed) if args.mix else candidates(args.device)
    head = {"model": args.model, "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "dtype": args.dtype, "torch": torch.__version__, "weights_bytes": size, "save_s": save_s,
            "candidates": len(mix)}
    print(f"checkpoint {size / 1e9:.1f} GB saved in {save_s:.1f} s; {len(mix)} candidates", flush=True)

    # Paired per candidate: a fresh process runs the experiment, then the persistent worker does.
    fresh: list[dict] = []
    swapped: list[dict] = []
    t_start = time.perf_counter()
    with EngineProcess(spec) as worker:
        start_s = time.perf_counter() - t_start
        for cand in mix:
            t = time.perf_counter()
            with EngineProcess(spec) as proc:
                row = experiment(proc, cand, t)
            fresh.append({**row, "wall_s": time.perf_counter() - t})  # until the process has exited
            progress("fresh", len(fresh) - 1, len(mix), row)
            swapped.append(experiment(worker, cand, time.perf_counter()))
            progress("swap", len(swapped) - 1, len(mix), swapped[-1])
            result = {**head, "fresh": fresh, "swap": swapped, "swap_worker_start_s": start_s,
                      **summarize(fresh, swapped, start_s)}
            if args.json_out:
                Path(args.json_out).write_text(json.dumps(result, indent=2))
    if "time_to_first_measurement" not in result:
        raise SystemExit("no candidate of the mix built; nothing was measured")
    print(f"\n{head['device']} {args.model} {args.dtype} ({size / 1e9:.1f} GB checkpoint, saved in {save_s:.1f} s)")
    print(f"{'candidate':<28} {'fresh s':>8} {'swap s':>8} {'b1 ms fresh/swap':>18} {'b8 ms fresh/swap':>18}")
    for f, s in zip(fresh, swapped, strict=True):
        steps = ("build failed" if "failed" in f or "failed" in s else
                 f"{f['decode_b1_ms']:>8.2f}/{s['decode_b1_ms']:<8.2f} {f['decode_b8_ms']:>8.2f}/{s['decode_b8_ms']:<8.2f}")
        print(f"{f['candidate']:<28} {f['seconds']:>8.2f} {s['seconds']:>8.2f} {steps}")
    ttfm = result["time_to_first_measurement"]
    eph = result["experiments_per_hour"]
    print(f"time to first measurement (median): fresh {ttfm['fresh_s']:.2f} s, swap {ttfm['swap_s']:.2f} s "
          f"-> {ttfm['ratio']:.1f}x")
    ready = result["time_to_ready"]
    print(f"time until measuring can start (median): fresh {ready['fresh_s']:.2f} s, swap {ready['swap_s']:.3f} s "
          f"-> {ready['ratio']:.0f}x")
    print(f"experiments per hour (incl. the swap worker's one start; {result['failed_builds']} of {len(mix)} builds "
          f"failed): fresh {eph['fresh']:.0f}, swap {eph['swap']:.0f} -> {eph['ratio']:.1f}x")


if __name__ == "__main__":
    main()
