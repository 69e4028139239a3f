"""The study loop: propose -> screen -> measure (fast tier) -> promote (full tier) -> record.

Generators propose in their own threads; this loop keeps the persistent engines busy and is the board's
only writer. A candidate that beats the incumbent beyond noise on the fast tier is confirmed on the
full tier and, if it wins there too, becomes the incumbent. Killed at any moment, a study resumes from
the board: finished measurements are kept, a candidate cut off mid-measurement is measured again, and
no candidate is measured twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from polyinfer.bench.profile import profile_workload
from polyinfer.board import Board, CandidateState, StudyState
from polyinfer.board.records import Study as StudyRecord
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.messages import WorkerSpec
from polyinfer.engine.serving import STEP_KNOBS
from polyinfer.engine.supervisor import EngineProcess, WorkerFailure
from polyinfer.models.spec import ModelSpec
from polyinfer.search import experiment
from polyinfer.search.agents import AgentPool
from polyinfer.search.generators.base import Generator
from polyinfer.search.ledger import Entry, Ledger
from polyinfer.search.proposal import Proposal
from polyinfer.search.screen import screen
from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.trace import Trace

BASELINE = "baseline"


@dataclass(frozen=True, slots=True)
class StudyResult:
    study: str
    experiments: int
    best_candidate: str | None  # hash of the final incumbent; None when nothing beat the reference
    best_label: str
    baseline_tok_s: float  # full tier, the final same-session A/B
    best_tok_s: float
    speedup: float
    ci_low: float
    ci_high: float
    verdict: str
    elapsed_s: float
    experiments_per_hour: float
    busy_fraction: float
    swap_s: float
    warmup_s: float
    measure_s: float
    idle_s: float

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class StudyConfig:
    name: str
    model: str | None = None
    traffic: str = "chat"
    budget_s: float = 180.0
    max_experiments: int | None = None
    agents: str = "knobs"
    device: str = "cpu"
    dtype: str = "float32"
    fast_layers: int | None = None  # layers the fast tier loads (default a fifth, at least 2); it fits 1 and these
    rounds: int = 4  # interleaved A/B rounds on the fast tier
    stop_below: float | None = 0.8  # a candidate below this ratio in its first two rounds stops there
    reps: int = 3  # timed calls per shape per round
    full_rounds: int = 2  # whole-trace replays per side on the full tier
    margin: float = 0.02  # a difference is real only when the ratio's CI clears 1 by this much
    experiment_timeout_s: float = 300.0
    seed: int = 0
    # Engine settings both tiers run under: fixed for a study (the KV pool is the engine's, shared by
    # both sides of every A/B, so its block size cannot be a candidate's knob).
    block_size: int = 16
    max_num_seqs: int = 64
    kv_cache_tokens: int | None = None

    def engine_config(self) -> EngineConfig:
        return EngineConfig(device=self.device, dtype=self.dtype, block_size=self.block_size,
                            max_num_seqs=self.max_num_seqs, kv_cache_tokens=self.kv_cache_tokens)


class StudyLoop:
    def __init__(
        self,
        config: StudyConfig,
        board: Board,
        trace: Trace,
        spec: ModelSpec,
        generators: list[Generator],
        view: Callable[[Ledger], None] = lambda ledger: None,
        baseline: Candidate | None = None,
    ) -> None:
        self.config, self.board, self.trace, self.spec = config, board, trace, spec
        self.profile = WorkloadProfile.of(trace)
        self.generators, self.view = generators, view
        self.baseline = baseline or Candidate.reference()  # what the speedup is measured against
        self.ledger = Ledger(config.budget_s)
        self.last_full_s = 0.0  # how long the last full-tier A/B took
        self.study = self._open()
        self.incumbent = self._incumbent()
        self.fast = EngineProcess(
            WorkerSpec(config.model, config.engine_config(),
                       min(config.fast_layers or max(2, spec.num_layers // 5), spec.num_layers))
        )
        self.full = EngineProcess(WorkerSpec(config.model, config.engine_config()))

    def run(self) -> StudyResult:
        c = self.config
        pending = [
            Candidate(r.source, dict(r.knobs), r.name) for r in self.board.pending_candidates(self.study.id)
        ]
        with self.fast, self.full, AgentPool(self.generators, self.board, self.study.id) as pool:
            self._measure(self.baseline, BASELINE)
            self._post_profile(self.incumbent)
            while self.ledger.remaining_s > self._final_reserve_s() and not (
                c.max_experiments and self.ledger.experiments >= c.max_experiments
            ):
                proposal = Proposal(pending.pop(0), "resumed") if pending else pool.next(timeout=0.25)
                for agent, note in pool.take_notes():
                    self.board.post(self.study.id, agent, note.kind, note.text, note.refs)
                self.ledger.queue_depth = pool.queue.qsize()
                if proposal is not None:
                    self._consider(proposal)
                elif pool.exhausted:
                    break
                self.view(self.ledger)
            self.ledger.end_search()
            result = self._final()
        self.board.set_study_state(self.study.id, StudyState.FINISHED)
        return result

    def _final_reserve_s(self) -> float:
        """Budget kept back for the final A/B: its replays cost what the last promotion's did, per round."""
        if self.incumbent.hash == self.baseline.hash:
            return 0.0
        return self.last_full_s * max(3, self.config.full_rounds) / self.config.full_rounds

    def _final(self) -> StudyResult:
        """The baseline against the final incumbent on the full tier, interleaved in one session: the
        speedup this study reports."""
        c, ledger = self.config, self.ledger
        best = self.incumbent
        out = self.full.call(
            experiment.full,
            self.baseline,
            best,
            self.trace,
            max(3, c.full_rounds),
            c.margin,
            c.seed + 1,
            timeout_s=c.experiment_timeout_s,
        )
        ledger.swap_s += out.swap_s
        ledger.warmup_s += out.warmup_s
        ledger.measure_s += out.measure_s
        comparison = out.ab.comparison
        self.board.post(
            self.study.id,
            "study",
            "result",
            f"final: {best.label} vs the baseline {self.baseline.label} on the full tier: {comparison.median:.3f}x "
            f"(95% CI {comparison.ci_low:.3f}-{comparison.ci_high:.3f}, {comparison.verdict})",
            (best.hash,),
        )
        won = best.hash != self.baseline.hash
        return StudyResult(
            self.config.name,
            ledger.experiments,
            best.hash if won else None,
            best.label,
            out.ab.incumbent.output_tok_s,
            out.ab.candidate.output_tok_s,
            comparison.median,
            comparison.ci_low,
            comparison.ci_high,
            str(comparison.verdict),
            ledger.elapsed_s,
            ledger.per_hour,
            ledger.busy_fraction,
            ledger.swap_s,
            ledger.warmup_s,
            ledger.measure_s,
            ledger.idle_s,
        )

    def _consider(self, p: Proposal) -> None:
        cand = p.candidate
        if p.generator != "resumed" and not self.board.add_candidate(
            self.study.id,
            cand.hash,
            name=cand.name,
            source=cand.source,
            knobs=cand.knobs,
            generator=p.generator,
            parent_hash=p.parent_hash,
        ):
            return  # the same code and knobs were measured (or queued) before
        if p.post:
            self.board.post(self.study.id, p.generator, "idea", p.post, (cand.hash,))
        screened = screen(cand)
        if not screened.ok:
            self._fail(cand, p.generator, "screen: " + "; ".join(screened.reasons), "screened-out")
            return
        self._measure(cand, p.generator)

    def _measure(self, cand: Candidate, generator: str) -> None:
        """Fast tier against the incumbent; promotion to the full tier when it is faster beyond noise."""
        sid, c = self.study.id, self.config
        if cand.hash in self.board.measured_hashes(sid, "fast"):
            return
        self.board.add_candidate(
            sid, cand.hash, name=cand.name, source=cand.source, knobs=cand.knobs, generator=generator
        )
        self.board.set_candidate_state(sid, cand.hash, CandidateState.MEASURING)
        started = time.monotonic()
        try:
            out = self.fast.call(
                experiment.fast,
                self.incumbent,
                cand,
                self.profile,
                self.spec.num_layers,
                c.rounds,
                c.reps,
                c.margin,
                c.seed,
                c.stop_below,
                timeout_s=c.experiment_timeout_s,
            )
            self._record(cand, generator, out)
            if not promote(self.incumbent, cand, out) or cand.hash == self.incumbent.hash:
                return
            self.board.set_candidate_state(sid, cand.hash, CandidateState.MEASURING)
            out = self.full.call(
                experiment.full,
                self.incumbent,
                cand,
                self.trace,
                c.full_rounds,
                c.margin,
                c.seed,
                timeout_s=c.experiment_timeout_s,
            )
            self._record(cand, generator, out)
            self.last_full_s = out.warmup_s + out.measure_s
        except WorkerFailure as e:
            # The worker was busy until it failed (a broken build, a crash, a timeout): swap time.
            self._fail(cand, generator, str(e), "failed", busy_s=time.monotonic() - started)
            return
        if out.faster:
            self.incumbent = cand
            self.ledger.new_incumbent(cand.label, self.ledger.best_speedup * out.ratio)
            self.board.post(
                sid,
                "study",
                "incumbent",
                f"{cand.label} beats the incumbent on the full tier by {out.ratio:.3f}x",
                (cand.hash,),
            )
            self._post_profile(cand)

    def _post_profile(self, cand: Candidate) -> None:
        """Post where `cand`'s decode step spends its time (per operation, whole model), once per
        candidate: the LLM agents read the latest such post."""
        sid = self.study.id
        if any(p.kind == "profile" and p.refs == (cand.hash,) for p in self.board.posts(sid, limit=10_000)):
            return  # resumed: posted before the kill
        started = time.monotonic()
        try:
            found = self.full.call(profile_workload, cand, self.profile, timeout_s=self.config.experiment_timeout_s)
        except WorkerFailure as e:
            self.board.post(sid, "study", "note", f"no profile of {cand.label}: {e}", (cand.hash,))
            return
        finally:
            self.ledger.measure_s += time.monotonic() - started  # the device was busy profiling
        self.board.post(sid, "study", "profile", found.table(), (cand.hash,))

    def _record(self, cand: Candidate, generator: str, out: experiment.Outcome) -> None:
        ab = out.ab
        comparison = ab.comparison
        score = ab.candidate.score if out.tier == "fast" else ab.candidate.output_tok_s
        self.board.record_measurement(
            self.study.id,
            cand.hash,
            tier=out.tier,
            repetitions=len(comparison.ratios),
            metrics={
                "score": score,
                "incumbent_score": score / comparison.median,
                "verdict": str(comparison.verdict),
                "detail": ab.candidate.to_json(),
            },
            ratio_to_incumbent=comparison.median,
            ci_low=comparison.ci_low,
            ci_high=comparison.ci_high,
            timings={"swap_s": out.swap_s, "warmup_s": out.warmup_s, "measure_s": out.measure_s},
        )
        self.ledger.record(
            Entry(
                self.ledger.elapsed_s,
                cand.label,
                generator,
                out.tier,
                comparison.median,
                str(comparison.verdict),
            ),
            out.swap_s,
            out.warmup_s,
            out.measure_s,
        )

    def _fail(self, cand: Candidate, generator: str, error: str, verdict: str, busy_s: float = 0.0) -> None:
        self.board.set_candidate_state(self.study.id, cand.hash, CandidateState.FAILED, error=error)
        self.board.post(self.study.id, generator, "failure", f"{cand.label}: {error}", (cand.hash,))
        self.ledger.record(Entry(self.ledger.elapsed_s, cand.label, generator, "fast", None, verdict), busy_s)

    def _open(self) -> StudyRecord:
        study = self.board.get_study(self.config.name)
        if study is None:
            return self.board.create_study(self.config.name, asdict(self.config))
        requeued = self.board.recover(study.id)
        self.ledger.resumed = sum(1 for v in self.board.snapshot(study.id).candidates if v.best)
        if requeued:
            self.board.post(
                study.id,
                "study",
                "note",
                f"resumed: {len(requeued)} candidate(s) cut off mid-measurement are measured again",
                tuple(r.hash for r in requeued),
            )
        return self.board.set_study_state(study.id, StudyState.RUNNING)

    def _incumbent(self) -> Candidate:
        for post in reversed(self.board.posts(self.study.id, limit=10_000)):
            if post.kind == "incumbent" and post.refs:
                record = self.board.candidate(self.study.id, post.refs[0])
                if record is not None:
                    return Candidate(record.source, dict(record.knobs), record.name)
        return self.baseline


def promote(incumbent: Candidate, candidate: Candidate, fast: experiment.Outcome) -> bool:
    """Whether a fast-tier result sends the candidate on to the full tier: faster beyond noise, or no
    different when it differs from the incumbent only in knobs the fast tier cannot see (`STEP_KNOBS`)."""
    if fast.faster:
        return True
    if str(fast.ab.comparison.verdict) != "same" or candidate.source != incumbent.source:
        return False
    changed = {k for k in {*incumbent.knobs, *candidate.knobs}
               if incumbent.knobs.get(k) != candidate.knobs.get(k)}
    return bool(changed) and changed <= STEP_KNOBS
