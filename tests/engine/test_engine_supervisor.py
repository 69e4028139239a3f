"""The persistent engine process: hot swaps, and candidates that raise, hang, return garbage or kill it."""

from __future__ import annotations

import pytest

from polyinfer.engine import worker
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.messages import FailureKind, WorkerSpec
from polyinfer.engine.sequence import SamplingParams
from polyinfer.engine.supervisor import EngineProcess, WorkerFailure

REFERENCE = Candidate.reference().source

RAISES = REFERENCE.replace("def build(ctx: SwapContext) -> ReferenceForward:\n    return ReferenceForward(ctx)",
                           "def build(ctx):\n    raise RuntimeError('deliberate failure in build')")
HANGS = REFERENCE + "\n\nclass Hang(ReferenceForward):\n    def __call__(self, batch):\n        while True:\n            pass\n\n\ndef build(ctx):\n    return Hang(ctx)\n"
EXITS = REFERENCE + "\n\nimport os\n\n\ndef build(ctx):\n    os._exit(7)\n"
WRONG_SHAPE = REFERENCE + "\n\ndef build(ctx):\n    f = ReferenceForward(ctx)\n    return lambda batch: f(batch)[:, :-1]\n"
EXITS_IN_FORWARD = REFERENCE + (
    "\n\nimport os\n\nclass Die(ReferenceForward):\n    def __call__(self, batch):\n"
    "        if batch.num_tokens > 3:\n            os._exit(3)\n        return super().__call__(batch)\n\n\n"
    "def build(ctx):\n    return Die(ctx)\n"
)
PROMPTS = [[1, 5, 9, 13], [7, 7, 7]]
PARAMS = SamplingParams(max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def proc():
    with EngineProcess(WorkerSpec("tiny-llama", EngineConfig(kv_cache_tokens=256))) as p:
        yield p


@pytest.fixture(scope="module")
def expected(proc):
    return proc.call(worker.generate, PROMPTS, PARAMS)


def test_cold_start_is_reported(proc):
    assert proc.cold_start is not None and proc.cold_start.total_s > 0
    assert proc.ready is not None and proc.ready.weights_bytes > 0


def test_hot_swap_reports_timings_and_keeps_outputs(proc, expected):
    report = proc.swap(Candidate.reference().with_knobs({"nonce": 1}))
    assert report.import_s >= 0 and report.build_s >= 0 and report.probe_s > 0
    assert proc.call(worker.generate, PROMPTS, PARAMS) == expected
    assert proc.restarts == 0


@pytest.mark.parametrize(
    ("source", "kind", "needle", "restarts"),
    [
        (RAISES, FailureKind.RAISED, "deliberate failure in build", 0),
        (WRONG_SHAPE, FailureKind.RAISED, "returned logits", 0),
        (EXITS, FailureKind.CRASHED, "exit code 7", 1),
        ("def build(ctx) return 1", FailureKind.RAISED, "failed to import", 0),
    ],
    ids=["raises", "wrong-shape", "os-exit", "syntax-error"],
)
def test_bad_candidate_costs_only_itself(proc, expected, source, kind, needle, restarts):
    before = proc.restarts
    with pytest.raises(WorkerFailure) as info:
        proc.swap(Candidate(source, name="bad"))
    assert info.value.kind is kind
    assert needle in str(info.value)
    assert proc.restarts - before == restarts
    assert proc.call(worker.generate, PROMPTS, PARAMS) == expected


def test_hanging_candidate_times_out_and_worker_recovers(proc, expected):
    good = Candidate.reference().with_knobs({"nonce": "incumbent"})
    proc.swap(good)
    with pytest.raises(WorkerFailure) as info:
        proc.swap(Candidate(HANGS, name="hang"), timeout_s=3)
    assert info.value.kind is FailureKind.TIMEOUT
    assert proc.current == good  # the restarted worker got the incumbent back
    assert proc.call(worker.describe)["candidate"] == good.hash
    assert proc.call(worker.generate, PROMPTS, PARAMS) == expected


def test_candidate_that_dies_mid_generation(proc, expected):
    proc.swap(Candidate(EXITS_IN_FORWARD, name="die-later"))  # the 3-token probe passes
    with pytest.raises(WorkerFailure) as info:
        proc.call(worker.generate, PROMPTS, PARAMS)
    assert info.value.kind is FailureKind.CRASHED
    proc.swap(Candidate.reference())
    assert proc.call(worker.generate, PROMPTS, PARAMS) == expected
