"""The verification battery: every check on one candidate, then the integrity checks over the whole run.

`verify_candidate` is the entry point for the study loop and the CLI. In-process it is for trusted
candidates; with `isolated=True` the battery runs in an engine worker process under a time limit, so a
candidate that hangs, crashes or eats memory fails its report instead of taking the caller down.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import time
from collections.abc import Callable

from polyinfer.engine.candidate import Candidate
from polyinfer.engine.engine import Engine
from polyinfer.engine.messages import WorkerSpec
from polyinfer.engine.supervisor import EngineProcess, WorkerFailure
from polyinfer.errors import CandidateError, PolyinferError
from polyinfer.models.load import LoadedModel, load_model
from polyinfer.verify import calibration, contamination, equivalence, integrity, invariance
from polyinfer.verify.config import BatteryConfig
from polyinfer.verify.context import Outcome, VerifyContext
from polyinfer.verify.guard import GuardLog
from polyinfer.verify.integrity import SpeedupClaim
from polyinfer.verify.report import CheckResult, Report

Check = Callable[[VerifyContext], Outcome]

CHECKS: dict[str, Check] = {
    "equivalence.logits": equivalence.logits,
    "equivalence.greedy": equivalence.greedy,
    "equivalence.perplexity": equivalence.perplexity,
    "equivalence.exact": equivalence.exact,  # exact mode only
    "contamination.needle": contamination.needle,
    "contamination.block_reuse": contamination.block_reuse,
    "contamination.shared_prefix": contamination.shared_prefix,
    "contamination.remainders": contamination.remainders,
    "contamination.preemption": contamination.preemption,
    "invariance.batch": invariance.batch,
    "invariance.determinism": invariance.determinism,
}
INTEGRITY = ("integrity.canary", "integrity.speedup", "integrity.hash")
ALL_CHECKS = (*CHECKS, *INTEGRITY)


def check_seed(seed: int, name: str) -> int:
    """Each check's seed, derived from the battery's: replaying one check needs only the battery seed."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:4], "little") >> 1


def _timed(name: str, seed: int, fn: Callable[[], Outcome]) -> CheckResult:
    t0 = time.perf_counter()
    try:
        out = fn()
    except CandidateError as e:  # the candidate raised, returned garbage or broke an integrity rule
        out = Outcome(False, {}, str(e))
    return CheckResult(name, out.passed, out.numbers, seed, time.perf_counter() - t0, out.reason, out.skipped)


def run_checks(ctx: VerifyContext, fail_fast: bool = False) -> list[CheckResult]:
    """The family checks the config selects, in order; `ctx.seed` is the battery seed."""
    results = []
    for name, check in CHECKS.items():
        if not _selected(ctx.config, name):
            continue
        seed = check_seed(ctx.seed, name)
        results.append(_timed(name, seed, lambda c=check, s=seed: c(ctx.with_seed(s))))  # type: ignore[misc]
        if fail_fast and not results[-1].passed:
            break
    return results


def run_battery(
    model: LoadedModel,
    candidate: Candidate,
    config: BatteryConfig,
    seed: int,
    measured_hash: str | None = None,
    claim: SpeedupClaim | None = None,
) -> Report:
    """The whole battery, in this process."""
    t0 = time.perf_counter()
    weights_before = integrity.weights_digest(model.weights, seed)
    ctx = VerifyContext(model, candidate, config, seed, GuardLog())
    floor = calibration.measure(ctx.with_seed(check_seed(seed, "calibration")))
    if floor.rel_err is not None:
        calibrated = dataclasses.replace(config, tolerance=floor.tolerance(config.tolerances))
        ctx = dataclasses.replace(ctx, config=calibrated)
    results = run_checks(ctx)
    if config.canary and _selected(config, "integrity.canary"):
        s = check_seed(seed, "integrity.canary")
        results.append(
            _timed("integrity.canary", s, lambda: integrity.canary_check(ctx.with_seed(s), run_checks))
        )
    speedup = None
    if _selected(config, "integrity.speedup"):
        s = check_seed(seed, "integrity.speedup")
        results.append(
            _timed(
                "integrity.speedup", s, lambda: integrity.speedup_check(ctx.with_seed(s), claim, run_checks)
            )
        )
        speedup = results[-1].numbers.get("counts") if results[-1].passed else None
    # Last, so that it has seen every guarded call of the battery, re-verification included.
    results.append(
        _timed("integrity.hash", seed, lambda: integrity.hash_check(ctx, measured_hash, weights_before))
    )
    return Report(
        candidate_hash=candidate.hash,
        candidate_name=candidate.name,
        model=model.source,
        weights_hash=model.weights_hash,
        num_layers=model.spec.num_layers,
        device=config.device,
        dtype=config.dtype,
        block_size=config.block_size,
        seed=seed,
        exact=config.exact,
        checks=tuple(results),
        seconds=time.perf_counter() - t0,
        speedup=speedup,
        created_at=time.time(),
        noise_floor=floor.rel_err,
        logits_tolerance=ctx.tol.logits_rel,
    )


def _selected(config: BatteryConfig, name: str) -> bool:
    if name == "equivalence.exact" and not config.exact:
        return False
    return not config.only or name in config.only


def verify_candidate(
    candidate: Candidate,
    model: LoadedModel | str | None = None,
    config: BatteryConfig | None = None,
    *,
    seed: int | None = None,
    num_layers: int | None = None,
    measured_hash: str | None = None,
    claimed_speedup: float | None = None,
    claimed_low: float | None = None,
    remeasure: Callable[[Candidate], float] | None = None,
    isolated: bool = False,
) -> Report:
    """Run the battery on `candidate` against `model` (a LoadedModel, or a reference `load_model` takes).

    `seed` None draws a fresh one (recorded in the report). `measured_hash` is the hash of the code the
    caller measured; a mismatch fails integrity. A `claimed_speedup` above the config's limit is
    re-measured through `remeasure(candidate) -> speedup` and the battery re-run with another seed before
    the report lets it count (`Report.speedup`); the re-measurement must reach the config's agreement
    fraction of the claim, or `claimed_low` (the claim's lower 95% bound) where that is lower. With
    `isolated`, `model` must be a reference.
    """
    config = config or BatteryConfig()
    seed = secrets.randbits(31) if seed is None else seed
    unknown = [n for n in config.only if n not in ALL_CHECKS]
    if unknown:
        raise PolyinferError(f"unknown check {unknown[0]!r}; checks: {', '.join(ALL_CHECKS)}")
    claim = None
    if claimed_speedup is not None:
        second = None
        if claimed_speedup > config.speedup_limit and remeasure is not None:
            second = remeasure(candidate)
        claim = SpeedupClaim(claimed_speedup, second, claimed_low)
    if not isolated:
        if not isinstance(model, LoadedModel):
            model = load_model(
                model, dtype=config.engine_config().torch_dtype, device=config.device, num_layers=num_layers
            )
        return run_battery(model, candidate, config, seed, measured_hash, claim)
    if isinstance(model, LoadedModel):
        raise PolyinferError("an isolated battery loads the model in its worker: pass a model reference")
    # The worker's own engine only loads the model; every check builds engines of its own.
    spec = WorkerSpec(model, config.engine_config(kv_cache_tokens=4 * config.block_size), num_layers)
    t0 = time.perf_counter()
    try:
        with EngineProcess(spec) as worker:
            report: Report = worker.call(
                battery_in_worker, candidate, config, seed, measured_hash, claim, timeout_s=config.timeout_s
            )
            return report
    except WorkerFailure as e:
        reason = f"the battery did not complete in its worker process: {e}"
        failed = CheckResult(
            "battery", False, {"timeout_s": config.timeout_s}, seed, time.perf_counter() - t0, reason
        )
        return Report(
            candidate_hash=candidate.hash,
            candidate_name=candidate.name,
            model=str(model),
            weights_hash="",  # the model may never have loaded
            num_layers=num_layers or 0,
            device=config.device,
            dtype=config.dtype,
            block_size=config.block_size,
            seed=seed,
            exact=config.exact,
            checks=(failed,),
            seconds=time.perf_counter() - t0,
            created_at=time.time(),
        )


def battery_in_worker(
    engine: Engine,
    candidate: Candidate,
    config: BatteryConfig,
    seed: int,
    measured_hash: str | None,
    claim: SpeedupClaim | None,
) -> Report:
    """Worker call (module-level, so that it pickles): the battery on the worker's loaded model."""
    return run_battery(engine.model, candidate, config, seed, measured_hash, claim)
