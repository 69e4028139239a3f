"""Integrity: the verified code is the measured code, the battery can still catch a broken candidate,
and an implausible speedup is confirmed before it counts.

These checks look at the battery as a whole rather than at one scenario, so the battery calls them
with what they need (the guard log, a way to run the other checks) after the family checks.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from polyinfer.engine.candidate import Candidate
from polyinfer.models.weights import Weights
from polyinfer.verify.context import Outcome, VerifyContext
from polyinfer.verify.guard import GuardLog
from polyinfer.verify.report import CheckResult

_CHUNK = 1 << 20
RunChecks = Callable[[VerifyContext, bool], Sequence[CheckResult]]  # (ctx, fail_fast) -> results

_CANARY_PATCH = """

# The verification canary: the reference with layer {layer} skipped. The battery must reject it.
import dataclasses as _dataclasses

_reference_build = build


def build(ctx):
    layers = ctx.weights.layers[:{layer}] + ctx.weights.layers[{layer} + 1:]
    weights = _dataclasses.replace(ctx.weights, layers=layers)
    return _reference_build(_dataclasses.replace(ctx, weights=weights))
"""


@dataclass(frozen=True, slots=True)
class SpeedupClaim:
    claimed: float  # throughput ratio over the incumbent that the study measured
    remeasured: float | None = None  # a second, independent measurement
    low: float | None = None  # the claim's lower 95% confidence bound, where the study computed one

    def threshold(self, agreement: float) -> float:
        """What the re-measurement must reach: `agreement` of the claim, or the claim's own lower bound
        where that is lower (a wide interval says the first number could honestly have come out there;
        against a host-bound reference, 25x with a 95% CI of 17-32x is such a claim)."""
        wanted = agreement * self.claimed
        return wanted if self.low is None else min(wanted, self.low)


def weights_digest(weights: Weights, seed: int) -> str:
    """A checksum of every weight's bytes, computed where the weights live.

    Each tensor's 32-bit words are dotted with seeded random 64-bit multipliers (wrapping), a hash that
    a candidate cannot aim at without knowing the seed and that costs one pass over memory on the
    device, rather than a copy of the whole model to the host for sha256.
    """
    gen = torch.Generator().manual_seed(seed)
    multipliers = torch.randint(-(2**62), 2**62, (_CHUNK,), generator=gen, dtype=torch.int64)
    on_device: dict[torch.device, torch.Tensor] = {}
    sums = []
    for t in weights.tensors():
        words = t.detach().contiguous().reshape(-1).view(torch.uint8)
        words = words.view(torch.int32) if words.numel() % 4 == 0 else words
        m = on_device.setdefault(words.device, multipliers.to(words.device))
        total = torch.zeros((), dtype=torch.int64, device=words.device)
        for start in range(0, words.numel(), _CHUNK):
            chunk = words[start : start + _CHUNK].to(torch.int64)
            total += (chunk * m[: chunk.numel()]).sum()
        sums.append(int(total))
    return hashlib.sha256(repr(sums).encode()).hexdigest()


def canary(seed: int, num_layers: int) -> Candidate:
    """A deliberately broken candidate, different each run: the reference skipping a seeded layer."""
    layer = random.Random(seed).randrange(num_layers)
    return Candidate(Candidate.reference().source + _CANARY_PATCH.format(layer=layer), {}, "canary")


def canary_check(ctx: VerifyContext, run_checks: RunChecks) -> Outcome:
    """Runs the battery on the canary, stopping at its first failure; passes when the canary failed."""
    bird = canary(ctx.seed, ctx.model.spec.num_layers)
    results = run_checks(ctx.with_candidate(bird, GuardLog()), True)
    caught = next((r for r in results if not r.passed), None)
    numbers = {"canary": bird.hash, "caught_by": caught.name if caught else None}
    if caught is None:
        return Outcome(
            False,
            numbers,
            "the canary (a reference with a layer skipped) passed every check: "
            "the battery is broken, so no verdict of it can be trusted",
        )
    return Outcome(True, numbers)


def speedup_check(ctx: VerifyContext, claim: SpeedupClaim | None, run_checks: RunChecks) -> Outcome:
    """Passes when the claim may count; `numbers["counts"]` is the speedup that does (None: none)."""
    limit = ctx.config.speedup_limit
    if claim is None:
        return Outcome(True, {"claimed": None, "counts": None}, "no speedup was claimed", skipped=True)
    numbers: dict[str, object] = {"claimed": claim.claimed, "limit": limit, "counts": None}
    if claim.claimed <= limit:
        return Outcome(True, numbers | {"counts": claim.claimed})
    numbers["remeasured"] = claim.remeasured
    if claim.remeasured is None:
        why = f"a claimed speedup above {limit:g}x needs a second measurement, and none was given"
        return Outcome(False, numbers, why)
    threshold = claim.threshold(ctx.config.speedup_agreement)
    numbers["threshold"] = threshold
    confirmed = math.isfinite(claim.remeasured) and claim.remeasured >= threshold
    reverify = run_checks(ctx.with_seed(ctx.seed ^ 0x5EED), False)
    failed = [r.name for r in reverify if not r.passed]
    numbers |= {"confirmed": confirmed, "reverified": not failed}
    if not confirmed:
        why = (f"the re-measurement gave {claim.remeasured:.3g}x against the claimed {claim.claimed:.3g}x "
               f"(at least {threshold:.3g}x needed)")
        return Outcome(False, numbers, why)
    if failed:
        return Outcome(False, numbers, f"re-verification with a new seed failed: {', '.join(failed)}")
    return Outcome(True, numbers | {"counts": min(claim.claimed, claim.remeasured)})


def hash_check(ctx: VerifyContext, measured_hash: str | None, weights_before: str) -> Outcome:
    verified = ctx.candidate.hash
    weights_same = weights_digest(ctx.model.weights, ctx.seed) == weights_before
    numbers = {
        "verified_hash": verified,
        "measured_hash": measured_hash,
        "guarded_calls": ctx.log.calls,
        "violations": len(ctx.log.violations),
        "weights_unchanged": weights_same,
    }
    if measured_hash is not None and measured_hash != verified:
        return Outcome(
            False, numbers, f"the measured candidate {measured_hash} is not the verified code {verified}"
        )
    if ctx.log.violations:
        return Outcome(False, numbers, ctx.log.violations[0])
    if not weights_same:
        return Outcome(
            False, numbers, "the candidate changed the model's weights, which the reference shares"
        )
    return Outcome(True, numbers)
