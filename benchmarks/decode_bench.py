"""Decode throughput of candidates against the gpt-fast-style compiled baseline, in one run on one device.

    python benchmarks/decode_bench.py --model llama-3.2-1b --device cuda --dtype bfloat16 \\
        --search 6m --json-out decode.json

With `--search BUDGET` it first runs `polyinfer optimize` for that budget and adds the winner to the
candidates. Every candidate is first screened against the reference's logits (decode at each batch size
and one prefill), then timed per batch size: the forward alone (`time_step`, CUDA events, with its
coefficient of variation) and whole engine steps (`engine_decode_tok_s`: scheduler, batch building and
sampling included, which is what a server gets). The compiled baseline runs after the engine's worker
has exited, in this process. The floor is batch x copy bandwidth / bytes of weights read per step.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import torch

from polyinfer.bench import steps
from polyinfer.board import Board
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.messages import WorkerSpec
from polyinfer.engine.supervisor import EngineProcess, WorkerFailure

HERE = Path(__file__).resolve().parent


def sibling(name: str) -> ModuleType:
    """Another script of benchmarks/ (not a package) as a module."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def search(args: argparse.Namespace) -> tuple[Candidate | None, dict]:
    """Run `polyinfer optimize` for the budget; its verified winner as a Candidate, plus its JSON."""
    board = Path(tempfile.mkdtemp(prefix="decode-bench-")) / "board.db"
    study = time.strftime("decode-bench-%Y%m%d-%H%M%S")
    cmd = [sys.executable, "-m", "polyinfer.cli", "optimize", "--model", args.model, "--device", args.device,
           "--dtype", args.dtype, "--budget", args.search, "--study", study, "--board", str(board), "--json"]
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"polyinfer optimize failed with exit code {done.returncode}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - t0
    if not result.get("best_candidate"):
        return None, result
    verdict = "passed" if result["verified"] else f"FAILED {result['verify_failures']}"
    print(f"search winner {result['best_label']}: verification {verdict}", flush=True)
    with Board.open(board) as b:
        found = b.get_study(study)
        assert found is not None
        record = b.candidate(found.id, result["best_candidate"])
    assert record is not None
    return Candidate(record.source, dict(record.knobs), record.name), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-sizes", default="1,64")
    ap.add_argument("--context", type=int, default=512, help="prompt tokens before decoding starts")
    ap.add_argument("--steps", type=int, default=64, help="timed decode steps")
    ap.add_argument("--reps", type=int, default=50, help="timed forward calls per batch size")
    ap.add_argument("--candidates", default="reference",
                    help="comma-separated candidates (built-in name or file, with :knob=value settings)")
    ap.add_argument("--search", help="also run `polyinfer optimize` for this budget and time its winner")
    ap.add_argument("--no-baseline", action="store_true", help="skip the compiled gpt-fast-style baseline")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    device = torch.device(args.device)
    bandwidth = sibling("engine_bench").copy_bandwidth(device)
    results: dict = {"model": args.model, "dtype": args.dtype, "torch": torch.__version__,
                     "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                     "date": time.strftime("%Y-%m-%d"), "copy_bandwidth_Bps": bandwidth,
                     "context": args.context, "rows": []}
    candidates = [(c, Candidate.parse(c)) for c in args.candidates.split(",") if c]
    if args.search:
        best, results["search"] = search(args)
        if best is not None:
            candidates.append(("search winner " + best.label, best))
        print(f"search: {json.dumps(results['search'])}", flush=True)
    if not args.no_baseline:
        baseline = sibling("compiled_baseline")
        for b in batches:
            m = baseline.measure(args.model, b, args.context, args.steps, args.device, getattr(torch, args.dtype))
            results["rows"].append({"candidate": "compiled baseline", "knobs": {}, "batch": b,
                                    "engine_tok_s": m["tok_s"], "forward_ms": m["ms_per_step"],
                                    "forward_tok_s": m["tok_s"], "forward_cv": None, "compile_s": m["compile_s"]})
            print(f"compiled baseline b{b}: {m['tok_s']:.0f} tok/s (compile {m['compile_s']:.0f} s)", flush=True)
            save(args, results)
    config = EngineConfig(device=args.device, dtype=args.dtype,
                          kv_cache_tokens=max(batches) * (args.context + 4 * args.steps + 64))
    with EngineProcess(WorkerSpec(args.model, config)) as proc:
        assert proc.ready is not None
        weights = proc.ready.weights_bytes
        results["weights_bytes"] = weights
        for name, candidate in candidates:
            try:
                measure(proc, name, candidate, batches, args, results)
            except WorkerFailure as e:  # a broken configuration is reported, and the sweep goes on
                print(f"{name}: FAILED: {e}", flush=True)
                results["rows"].append({"candidate": name, "knobs": dict(candidate.knobs), "error": str(e)})
                save(args, results)
    show(results)


def measure(proc: EngineProcess, name: str, candidate: Candidate, batches: list[int],
            args: argparse.Namespace, results: dict) -> None:
    """Screen `candidate` against the reference's logits, then time it at each batch size."""
    proc.swap(Candidate.reference())
    checks = [proc.call(steps.check_logits, candidate, b, args.context, timeout_s=600) for b in batches]
    checks.append(proc.call(steps.check_logits, candidate, 2, args.context, 64, timeout_s=600))
    for c in checks:
        print(f"{name}: {c.kind} b{c.batch_size} vs reference: rel err {c.rel_err:.2e}, max abs "
              f"{c.max_abs_err:.3f}, argmax agreement {c.argmax_agreement:.3f}", flush=True)
    t0 = time.perf_counter()
    proc.swap(candidate, timeout_s=900)
    swap_s = time.perf_counter() - t0
    for b in batches:
        timing = proc.call(steps.time_step, b, args.context, 1, args.reps, 10, timeout_s=900)
        tok_s = proc.call(steps.engine_decode_tok_s, b, args.context, args.steps, timeout_s=900)
        row = {"candidate": name, "knobs": dict(candidate.knobs), "batch": b, "swap_s": swap_s,
               "forward_ms": timing.median_s * 1e3, "forward_cv": timing.cv,
               "forward_tok_s": b / timing.median_s, "engine_tok_s": tok_s,
               "checks": [vars_of(c) for c in checks]}
        results["rows"].append(row)
        save(args, results)
        print(f"{name} b{b}: forward {row['forward_ms']:.3f} ms (cv {timing.cv:.3f}), "
              f"engine {tok_s:.0f} tok/s", flush=True)


def save(args: argparse.Namespace, results: dict) -> None:
    """Rewrite the JSON after every measurement, so a run cut short keeps what it measured."""
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))


def vars_of(check: steps.LogitsCheck) -> dict:
    return {"kind": check.kind, "batch": check.batch_size, "rel_err": check.rel_err,
            "max_abs_err": check.max_abs_err, "argmax_agreement": check.argmax_agreement}


def show(results: dict) -> None:
    """The table, candidates numbered (their full names follow it)."""
    bw, weights = results["copy_bandwidth_Bps"], results["weights_bytes"]
    base = {r["batch"]: r["engine_tok_s"] for r in results["rows"] if r["candidate"] == "compiled baseline"}
    names = list(dict.fromkeys(r["candidate"] for r in results["rows"]))
    print(f"\n{results['device']}  {results['model']} {results['dtype']}  torch {results['torch']}  "
          f"context {results['context']}")
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s   weights {weights / 1e9:.3f} GB   "
          f"floor {bw / weights:.0f} tok/s per sequence")
    print(f"{'#':>2} {'batch':>5} {'fwd ms':>8} {'cv':>6} {'fwd tok/s':>10} {'engine tok/s':>13} "
          f"{'% floor':>8} {'vs compiled':>11}")
    for r in results["rows"]:
        n = names.index(r["candidate"])
        if "error" in r:
            print(f"{n:>2} FAILED: {r['error'][:300]}")
            continue
        floor = r["batch"] * bw / weights
        ratio = f"{r['engine_tok_s'] / base[r['batch']]:.2f}x" if r["batch"] in base else "-"
        cv = f"{r['forward_cv']:.3f}" if r["forward_cv"] is not None else "-"
        print(f"{n:>2} {r['batch']:>5} {r['forward_ms']:>8.3f} {cv:>6} {r['forward_tok_s']:>10.0f} "
              f"{r['engine_tok_s']:>13.0f} {100 * r['engine_tok_s'] / floor:>7.1f}% {ratio:>11}")
    for n, name in enumerate(names):
        print(f"{n:>2} {name}")

if __name__ == "__main__":
    main()
