"""The LLM agent's prompt, built from a board snapshot: the contract, the incumbent, the profile, what has
worked and what has failed, what the other agents said, and the agent's own focus.

Everything taken from the board is truncated, so a long error or a chatty agent cannot crowd out the
rest; the sizes below keep a prompt near 10k tokens for a Llama-sized reference.
"""

from __future__ import annotations

import inspect
import itertools
import re
from dataclasses import dataclass

from polyinfer.board import BoardSnapshot, CandidateView, Post
from polyinfer.engine import candidate as candidate_module
from polyinfer.engine.batch import Batch
from polyinfer.engine.candidate import Candidate, SwapContext
from polyinfer.engine.kv_pool import KVPool
from polyinfer.kernels.registry import KERNEL_NAMES
from polyinfer.models.spec import ModelSpec
from polyinfer.models.weights import LayerWeights, Weights
from polyinfer.search.screen import ALLOWED_MODULES

BEST_SHOWN = 5
FAILURES_SHOWN = 6
POSTS_SHOWN = 10
ERROR_CHARS = 600
POST_CHARS = 400
PROFILE_CHARS = 4000


@dataclass(frozen=True, slots=True)
class PromptInputs:
    agent: str  # this agent's name: its own posts are left out
    focus: str  # what this agent works on, e.g. "attention", "weight layout", "CUDA graphs"
    tier: str  # the measurements to rank candidates by
    profile: str | None  # a per-operation profile from the config; else the board's latest 'profile' post


# The types a candidate touches, with the members it may use besides their fields.
CONTRACT_TYPES: tuple[tuple[type, tuple[str, ...]], ...] = (
    (SwapContext, ()),
    (ModelSpec, ("q_size", "kv_size")),
    (Batch, ("num_seqs", "num_tokens", "is_decode_only", "max_seq_len")),
    (KVPool, ("num_layers", "layer")),
    (Weights, ()),
    (LayerWeights, ()),
)


def outline(cls: type, members: tuple[str, ...]) -> str:
    """The class as its source declares it (docstring and fields), with one line per listed member."""
    lines = inspect.getsource(cls).splitlines()
    head = list(itertools.takewhile(lambda line: not re.match(r"    (def |@)", line), lines))
    while head and not head[-1].strip():
        head.pop()
    for name in members:
        member = inspect.getattr_static(cls, name)
        function = member.fget if isinstance(member, property) else member
        assert function is not None, f"{cls.__name__}.{name} has no getter"
        signature = next(line.strip() for line in inspect.getsource(function).splitlines() if "def " in line)
        doc = (inspect.getdoc(function) or "").split("\n")[0]
        decorator = "    @property\n" if isinstance(member, property) else ""
        head.append(f"{decorator}    {signature} ...{'  # ' + doc if doc else ''}")
    return "\n".join(head)


def contract() -> str:
    """The candidate contract as the engine states it: its docstring and the types a candidate touches."""
    types = "\n\n".join(outline(cls, members) for cls, members in CONTRACT_TYPES)
    allowed = ", ".join(ALLOWED_MODULES[1:])
    kernels = ",".join(KERNEL_NAMES)
    return (
        f"{candidate_module.__doc__}\n```python\n{types}\n```\n\n"
        f"Rules: import only {allowed} (and their submodules). No file, process, network or interpreter "
        "access (os, sys, subprocess, open, exec, eval, ...): such code is rejected unread. Triton building "
        f"blocks you may compose, each with a PyTorch `reference` beside it: polyinfer.kernels.{{{kernels}}}. "
        "The outputs must match the reference forward pass's (a verification battery compares tokens and "
        "logits) for every batch: mixed prefill and decode, chunked prefill, any batch size and context "
        "length. Knobs, if you declare KNOBS, arrive in ctx.knobs; read them with ctx.knobs.get(name, default)."
    )


def system_message(inputs: PromptInputs) -> str:
    return (
        f"You are {inputs.agent}, one of several coding agents that search for a faster LLM forward pass "
        "for one model on one machine. Every candidate you write is screened, measured against the "
        "incumbent and verified against the reference. The other agents share only this board with you.\n\n"
        f"# The candidate contract\n{contract()}"
    )


def user_message(snapshot: BoardSnapshot, inputs: PromptInputs) -> str:
    parts = [f"# Your focus\n{inputs.focus or 'anything that makes the forward pass faster'}"]
    incumbent = snapshot.incumbent
    if incumbent is None:
        parts.append(
            "# The incumbent\nNothing has been measured yet. This is the reference forward pass, "
            f"the correctness oracle:\n```python\n{Candidate.reference().source}```"
        )
    else:
        parts.append(
            f"# The incumbent: {describe(incumbent, inputs.tier)}\n```python\n{incumbent.record.source}```"
        )
    profile = inputs.profile or latest_profile(snapshot.posts)
    if profile:
        parts.append(f"# Per-operation profile of the incumbent\n{profile[:PROFILE_CHARS]}")
    measured = [c for c in snapshot.candidates if inputs.tier in c.best]
    best = sorted(measured, key=lambda c: c.best[inputs.tier].score, reverse=True)[:BEST_SHOWN]
    if best:
        parts.append("# Best candidates so far\n" + "\n".join(f"- {describe(c, inputs.tier)}" for c in best))
    failures = snapshot.failures[-FAILURES_SHOWN:]
    if failures:
        lines = [
            f"- {f.name}@{f.hash[:8]} by {f.generator}: {clip(f.error or '', ERROR_CHARS)}" for f in failures
        ]
        parts.append("# Failed candidates (do not repeat these mistakes)\n" + "\n".join(lines))
    others = [p for p in snapshot.posts if p.agent != inputs.agent][-POSTS_SHOWN:]
    if others:
        lines = [f"- {p.agent} ({p.kind}): {clip(p.text, POST_CHARS)}" for p in others]
        parts.append("# Recent posts by the other agents\n" + "\n".join(lines))
    parts.append(
        "# Your task\nWrite ONE complete Python module, a new candidate that should beat the incumbent, in a "
        "single ```python fenced block. Then explain in at most five sentences what it changes and why it "
        "should be faster."
    )
    return "\n\n".join(parts)


def messages(snapshot: BoardSnapshot, inputs: PromptInputs) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system_message(inputs)},
        {"role": "user", "content": user_message(snapshot, inputs)},
    ]


def describe(view: CandidateView, tier: str) -> str:
    r = view.record
    head = f"{r.name or 'candidate'}@{r.hash[:8]} by {r.generator}"
    m = view.best.get(tier)
    if m is None:
        return f"{head}, not yet measured on the {tier} tier"
    metrics = ", ".join(f"{k}={v:.4g}" for k, v in m.metrics.items() if isinstance(v, int | float))
    return f"{head}: {m.score:.3f}x the incumbent on the {tier} tier ({clip(metrics, 200)})"


def latest_profile(posts: tuple[Post, ...]) -> str | None:
    return next((p.text for p in reversed(posts) if p.kind == "profile"), None)


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
