"""The live view and the end-of-study files show what the ledger holds."""

from __future__ import annotations

import json

from rich.console import Console

from polyinfer.engine.candidate import Candidate
from polyinfer.search.ledger import Entry, Ledger
from polyinfer.search.progress import render
from polyinfer.search.report import changed_knobs, save
from polyinfer.search.study import StudyResult


def ledger() -> Ledger:
    led = Ledger(budget_s=60)
    led.record(Entry(1.0, "reference@1", "baseline", "fast", 1.0, "same"), 0.1, 2.0)
    led.record(Entry(3.0, "fast@2", "knobs", "fast", 1.3, "faster"), 0.2, 2.0)
    led.record(Entry(4.0, "fast@3", "llm", "fast", None, "failed"), 0.5)
    led.new_incumbent("fast@2", 1.25)
    return led


def test_live_view_shows_the_ledger():
    console = Console(record=True, width=140)
    console.print(render(ledger(), "study x"))
    text = console.export_text()
    for needle in ("experiments 3", "best speedup 1.250x", "incumbent fast@2", "faster", "failed", "llm"):
        assert needle in text


def test_summary_and_plot_are_written(tmp_path):
    result = StudyResult("x", 3, "abc", "fast@2", 10.0, 12.5, 1.25, 1.2, 1.3, "faster", 60.0, 180.0, 0.9,
                         0.8, 0.5, 4.0, 54.7)
    summary, plot = save(tmp_path / "study", result, ledger())
    assert json.loads(summary.read_text())["speedup"] == 1.25
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_only_knobs_off_their_defaults_are_shown():
    fast = Candidate.builtin("fast")
    knobs = {"fuse_qkv": True, "fuse_gate_up": False, "decode_attention": "batched", "serve.prefix_caching": True,
             "serve.max_prefill_chunk": 512}
    assert changed_knobs(fast.source, knobs) == "fuse_qkv, decode_attention=batched, prefix_caching"
