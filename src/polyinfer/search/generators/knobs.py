"""KnobSearcher: Optuna ask/tell over the knob choices a base candidate declares in `KNOBS`.

The knobs span a grid. TPE (the default) treats every knob as categorical. CMA-ES treats each knob whose
choices are all numbers as ordered (an integer index into its sorted choices) and leaves the others to TPE;
a space with no such knob is searched by TPE alone, and a note says so. The first trial is the base with
its default knobs (the first choice of each), so the study has a baseline of the family; then come the
starting points the base suggests in `SEEDS` (those that lie in this space), then the sampler's own.

Each `propose` first tells Optuna what the snapshot now shows for the outstanding trials: the `metric` of
the candidate's best measurement on `tier` (higher is better), or FAIL for a candidate that failed or was
rejected. A trial whose candidate the board already holds is never proposed again: it is told the known
result at once, or waits for the pending one; and an unexplored point is enqueued in its place, so a
sampler that keeps returning to known points cannot stall the search. Settings the base declares
invalid (its `invalid(knobs)` says why they cannot build) are told to Optuna as failed and never
proposed. The searcher is exhausted when every grid point has been explored or `max_trials` candidates
have been proposed.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler, CmaEsSampler, TPESampler
from optuna.trial import TrialState

from polyinfer.board import TIERS, BoardSnapshot, CandidateState, CandidateView
from polyinfer.engine.candidate import Candidate, declared_check, declared_knobs, declared_seeds
from polyinfer.engine.serving import SERVING_KNOBS
from polyinfer.errors import PolyinferError
from polyinfer.search.generators.base import Notebook
from polyinfer.search.proposal import Note, Proposal

SAMPLERS = ("tpe", "cmaes")
_RANDOM_TRIES = 64  # random draws for an unexplored point before walking the grid in order


@dataclass(frozen=True, slots=True)
class KnobConfig:
    base: Candidate | str = "reference"  # a candidate, or the name of a built-in one
    name: str = "knobs"
    sampler: str = "tpe"  # one of SAMPLERS
    batch: int = 4  # proposals per `propose` call, at most
    max_trials: int | None = None  # distinct candidates to propose; default: the whole grid
    tier: str = "fast"  # the measurements to learn from
    metric: str = "score"  # the key in `Measurement.metrics` to maximise
    seed: int = 0
    serving: bool = False  # also search the engine's serving knobs (prefix caching, prefill chunk)
    start_at_defaults: bool = True  # the family's defaults first; one searcher of a team is enough

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise PolyinferError(f"unknown knob sampler {self.sampler!r}; use one of {', '.join(SAMPLERS)}")
        if self.batch < 1:
            raise PolyinferError(f"the knob searcher's batch must be at least 1, got {self.batch}")
        if self.max_trials is not None and self.max_trials < 1:
            raise PolyinferError(f"max_trials must be at least 1, got {self.max_trials}")
        if self.tier not in TIERS:
            raise PolyinferError(f"tier {self.tier!r} is not one of {', '.join(TIERS)}")


@dataclass(frozen=True, slots=True)
class Axis:
    """One knob as Optuna sees it: an index into `choices` drawn from `distribution`."""

    name: str
    choices: tuple[Any, ...]
    distribution: BaseDistribution


def is_ordered(choices: list[Any]) -> bool:
    """Whether CMA-ES can treat the knob as a number: distinct numeric choices (bools are categories)."""
    numeric = all(isinstance(c, int | float) and not isinstance(c, bool) for c in choices)
    return numeric and len(set(choices)) == len(choices) > 1


def make_axes(knobs: dict[str, list[Any]], ordered: bool) -> tuple[Axis, ...]:
    axes = []
    for name, choices in sorted(knobs.items()):
        if ordered and is_ordered(choices):
            axes.append(Axis(name, tuple(sorted(choices)), IntDistribution(0, len(choices) - 1)))
        else:
            axes.append(Axis(name, tuple(choices), CategoricalDistribution(tuple(range(len(choices))))))
    return tuple(axes)


class KnobSearcher:
    def __init__(self, config: KnobConfig) -> None:
        self.config = config
        self.name = config.name
        self.base = Candidate.builtin(config.base) if isinstance(config.base, str) else config.base
        self.declared = {**declared_knobs(self.base), **(SERVING_KNOBS if config.serving else {})}
        self.invalid = declared_check(self.base)
        self._skipped = 0  # settings the base declares invalid, told to Optuna as failed, never proposed
        self._notes = Notebook()
        use_cmaes = config.sampler == "cmaes" and any(is_ordered(c) for c in self.declared.values())
        if config.sampler == "cmaes" and not use_cmaes:
            self._notes.add(
                "note",
                f"CMA-ES needs numeric knobs, but {self.base.label} declares only categorical ones "
                f"({', '.join(self.declared) or 'none'}); searching them with TPE instead",
            )
        self.axes = make_axes(self.declared, ordered=use_cmaes)
        self.grid_size = math.prod(len(a.choices) for a in self.axes)
        # The constant liar scores running trials as poor, so one batch of asks spreads out.
        tpe = TPESampler(seed=config.seed, constant_liar=True)
        sampler: BaseSampler = (
            CmaEsSampler(seed=config.seed, independent_sampler=tpe, warn_independent_sampling=False)
            if use_cmaes
            else tpe
        )
        self.study = optuna.create_study(study_name=self.name, direction="maximize", sampler=sampler)
        self.defaults = {name: choices[0] for name, choices in self.declared.items()}
        if config.start_at_defaults:
            self.study.enqueue_trial(self._params(self.defaults))
            for seed in self.seeds():
                self.study.enqueue_trial(self._params(seed))
        self._distributions = {a.name: a.distribution for a in self.axes}
        self._rng = random.Random(config.seed)
        self._explored: set[str] = set()  # candidate hashes proposed here or found on the board
        self._waiting: dict[int, str] = {}  # trial number -> the candidate whose result it awaits
        self._proposed = 0
        self._covered = False  # set when no unexplored point is left

    @property
    def exhausted(self) -> bool:
        limit = self.config.max_trials
        return (
            self._covered
            or len(self._explored) >= self.grid_size
            or (limit is not None and self._proposed >= limit)
        )

    def take_notes(self) -> list[Note]:
        return self._notes.take()

    def propose(self, snapshot: BoardSnapshot) -> list[Proposal]:
        views = {c.hash: c for c in snapshot.candidates}
        self._tell(views)
        proposals: list[Proposal] = []
        while len(proposals) < self.config.batch and not self.exhausted:
            trial = self.study.ask(self._distributions)
            knobs = self._knobs(trial.params)
            candidate = self.base.with_knobs(knobs)
            reason = self.invalid(knobs)
            if reason is not None:
                self._skip(trial.number, candidate.hash, reason, views)
                continue
            self._waiting[trial.number] = candidate.hash
            if candidate.hash in self._explored or candidate.hash in views:
                self._explored.add(candidate.hash)
                self._tell(views)
                self._enqueue_unexplored(views)
                continue
            self._explored.add(candidate.hash)
            self._proposed += 1
            baseline = knobs == self.defaults
            post = f"baseline of {self.base.name or 'the base'}: default knobs {knobs}" if baseline else None
            proposals.append(Proposal(candidate, self.name, self.base.hash, post))
        return proposals

    def _skip(self, number: int, hash: str, reason: str, views: dict[str, CandidateView]) -> None:
        self.study.tell(number, state=TrialState.FAIL)
        self._explored.add(hash)
        self._skipped += 1
        if self._skipped == 1:
            self._notes.add("note", f"skipping knob settings {self.base.name or 'the base'} declares invalid "
                                    f"(first: {reason}); they are never measured")
        self._enqueue_unexplored(views)

    def seeds(self) -> list[dict[str, Any]]:
        """The base's suggested starting points that lie in this space (others, e.g. GPU-only choices on a
        CPU, are dropped), completed with the defaults."""
        points = []
        for seed in declared_seeds(self.base):
            point = {**self.defaults, **seed}
            if point.keys() == self.defaults.keys() and all(point[a.name] in a.choices for a in self.axes):
                points.append(point)
        return points

    def _params(self, knobs: dict[str, Any]) -> dict[str, int]:
        return {a.name: a.choices.index(knobs[a.name]) for a in self.axes}

    def _knobs(self, params: dict[str, Any]) -> dict[str, Any]:
        return {a.name: a.choices[params[a.name]] for a in self.axes}

    def _tell(self, views: dict[str, CandidateView]) -> None:
        for number, hash in list(self._waiting.items()):
            outcome = self._outcome(views.get(hash))
            if outcome is None:
                continue
            if outcome is TrialState.FAIL:
                self.study.tell(number, state=TrialState.FAIL)
            else:
                self.study.tell(number, outcome)
            del self._waiting[number]

    def _outcome(self, view: CandidateView | None) -> float | TrialState | None:
        """The trial's result as the board shows it; None while the candidate is still pending."""
        if view is None:
            return None
        if view.state in (CandidateState.FAILED, CandidateState.REJECTED):
            return TrialState.FAIL
        measurement = view.best.get(self.config.tier)
        if measurement is None:
            return None
        value = measurement.metrics.get(self.config.metric)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        self._notes.add(
            "failure",
            f"the {self.config.tier} measurement of {view.hash} has no numeric metric {self.config.metric!r} "
            f"(it has {', '.join(measurement.metrics) or 'none'}); the knob searcher counts it as failed",
            (view.hash,),
        )
        return TrialState.FAIL

    def _enqueue_unexplored(self, views: dict[str, CandidateView]) -> None:
        """Make the next ask an unexplored grid point, or mark the grid covered when none is left."""

        def unexplored(point: tuple[int, ...]) -> bool:
            knobs = self._knobs(dict(zip(self._distributions, point, strict=True)))
            h = self.base.with_knobs(knobs).hash
            return h not in self._explored and h not in views and self.invalid(knobs) is None

        sizes = [len(a.choices) for a in self.axes]
        draws = (tuple(self._rng.randrange(n) for n in sizes) for _ in range(_RANDOM_TRIES))
        walk = itertools.product(*(range(n) for n in sizes))
        point = next((p for p in itertools.chain(draws, walk) if unexplored(p)), None)
        if point is None:
            self._covered = True
        else:
            self.study.enqueue_trial(dict(zip(self._distributions, point, strict=True)))
