"""The reviewer's view of what a candidate changes: a unified diff against the reference candidate."""

from __future__ import annotations

import difflib

from polyinfer.engine.candidate import Candidate


def reference_diff(candidate: Candidate) -> str:
    """`diff -u reference.py candidate.py`, as text (empty when the candidate is the reference)."""
    reference = Candidate.reference().source.splitlines(keepends=True)
    source = candidate.source.splitlines(keepends=True)
    name = f"{candidate.name or 'candidate'}.py"
    return "".join(difflib.unified_diff(reference, source, "a/reference.py", f"b/{name}"))
