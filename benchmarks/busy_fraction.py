"""Device busy fraction when every agent is slower than a measurement.

    python benchmarks/busy_fraction.py --model tiny-llama --think 6 --budget 60 --agents 1,3

Each agent "thinks" `--think` seconds before each proposal (an LLM's latency), then proposes what its
own knob searcher (over the `fast` family and the serving knobs, a seed of its own) would. Agents run in
their own threads and share only the board, so with enough of them the measurement queue never runs dry
even though each one alone is slower than a measurement. Prints the busy fraction per agent count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from polyinfer.board import Board, BoardSnapshot
from polyinfer.models.load import model_spec
from polyinfer.search.generators.knobs import KnobConfig, KnobSearcher
from polyinfer.search.proposal import Note, Proposal
from polyinfer.search.study import StudyConfig, StudyLoop
from polyinfer.traffic.workload import load_workload


class Thinking:
    """A generator that takes `think_s` per proposal, then proposes one candidate."""

    def __init__(self, inner: KnobSearcher, think_s: float) -> None:
        self.inner, self.think_s, self.name = inner, think_s, inner.name

    @property
    def exhausted(self) -> bool:
        return self.inner.exhausted

    def propose(self, snapshot: BoardSnapshot) -> list[Proposal]:
        time.sleep(self.think_s)
        return self.inner.propose(snapshot)[:1]

    def take_notes(self) -> list[Note]:
        return self.inner.take_notes()


def run(model: str, agents: int, think_s: float, budget_s: float, root: Path) -> dict[str, float]:
    config = StudyConfig(name=f"busy-{agents}", model=model, budget_s=budget_s, rounds=3, reps=3)
    generators = [Thinking(KnobSearcher(KnobConfig(base="fast", name=f"agent-{i}", seed=i, serving=True, batch=1,
                                                    start_at_defaults=i == 0)),
                           think_s) for i in range(agents)]
    with Board.open(root / f"board-{agents}.db") as board:
        loop = StudyLoop(config, board, load_workload("chat", 6, 64), model_spec(model), generators)
        loop.run()
    ledger = loop.ledger  # busy_fraction covers the search phase, not the final A/B
    return {"agents": agents, "think_s": think_s, "experiments": ledger.experiments,
            "device_s_per_experiment": ledger.search_busy_s / max(1, ledger.experiments),
            "busy_fraction": ledger.busy_fraction, "search_s": ledger.search_s or 0.0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--think", type=float, default=6.0, help="seconds each agent takes per proposal")
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--agents", default="1,3")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="polyinfer-busy-"))
    rows = [run(args.model, int(n), args.think, args.budget, root) for n in args.agents.split(",")]
    print(f"\n{'agents':>6} {'think s':>8} {'device s/exp':>14} {'experiments':>12} {'busy':>6}")
    for r in rows:
        print(f"{r['agents']:>6} {r['think_s']:>8.1f} {r['device_s_per_experiment']:>14.2f} "
              f"{r['experiments']:>12} {100 * r['busy_fraction']:>5.1f}%")
    print(f"median device time {statistics.median(r['device_s_per_experiment'] for r in rows):.2f} s per experiment")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
