"""Generators are plugins chosen by name: `make_generator("knobs", base="reference")`, or a whole team of
agents from one spec, `make_agents("knobs,llm:attention,llm:weight layout", **settings)`.

In a spec, `kind:argument` sets the kind's main setting: the base candidate of a knob searcher, the
focus of an LLM agent. Agents are named after both (`llm-attention`) and numbered when a name repeats.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from polyinfer.errors import PolyinferError
from polyinfer.search.generators.base import Generator
from polyinfer.search.generators.knobs import KnobConfig, KnobSearcher
from polyinfer.search.generators.llm import LLMAgent, LLMConfig


@dataclass(frozen=True, slots=True)
class Plugin:
    config: type[Any]  # a frozen dataclass of the generator's settings
    factory: Callable[[Any], Generator]
    argument: str  # the setting that `kind:argument` in a spec sets

    @property
    def settings(self) -> frozenset[str]:
        return frozenset(f.name for f in fields(self.config))


GENERATORS: dict[str, Plugin] = {
    "knobs": Plugin(KnobConfig, KnobSearcher, "base"),
    "llm": Plugin(LLMConfig, LLMAgent, "focus"),
}


def plugin(kind: str) -> Plugin:
    try:
        return GENERATORS[kind]
    except KeyError:
        raise PolyinferError(f"no generator {kind!r}; generators: {', '.join(GENERATORS)}") from None


def make_generator(kind: str, **config: Any) -> Generator:
    """A generator of `kind` with the given settings; unknown settings are an error, not ignored."""
    p = plugin(kind)
    unknown = sorted(set(config) - p.settings)
    if unknown:
        raise PolyinferError(
            f"generator {kind!r} has no setting {', '.join(unknown)}; its settings: {', '.join(sorted(p.settings))}"
        )
    return p.factory(p.config(**config))


def make_agents(spec: str, **common: Any) -> list[Generator]:
    """One generator per comma-separated entry of `spec`, each given the `common` settings its kind has.

    A setting that no kind of generator has is an error; so is `name` (names come from the spec). A knob
    searcher's `seed` is offset by its position, so two alike searchers do not walk the same path.
    """
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    if not entries:
        raise PolyinferError(f"no generators in {spec!r}; write e.g. 'knobs,llm:attention'")
    everything = frozenset().union(*(p.settings for p in GENERATORS.values())) - {"name"}
    unknown = sorted(set(common) - everything)
    if unknown:
        raise PolyinferError(f"no generator has the setting {', '.join(unknown)}")
    agents: list[Generator] = []
    taken: set[str] = set()
    kinds_made: list[str] = []
    for i, entry in enumerate(entries):
        kind, _, argument = (s.strip() for s in entry.partition(":"))
        p = plugin(kind)
        config = {k: v for k, v in common.items() if k in p.settings}
        name = kind
        if argument:
            config[p.argument] = argument
            name = f"{kind}-{slug(argument)}"
        if "seed" in p.settings:
            config["seed"] = common.get("seed", 0) + i
        if "start_at_defaults" in p.settings and kind in kinds_made:
            config["start_at_defaults"] = False  # the team's first searcher proposes the defaults
        kinds_made.append(kind)
        unique, n = name, 1
        while unique in taken:
            n += 1
            unique = f"{name}-{n}"
        taken.add(unique)
        agents.append(make_generator(kind, name=unique, **config))
    return agents


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"
