"""Generators by name, and teams of agents from a spec."""

from __future__ import annotations

import pytest

from polyinfer.errors import PolyinferError
from polyinfer.search.generators import KnobSearcher, LLMAgent, make_agents, make_generator

ENDPOINT = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}


def test_a_spec_makes_distinctly_named_agents() -> None:
    agents = make_agents(
        "knobs, llm:attention, llm:weight layout, llm, llm", **ENDPOINT, seed=7, budget_usd=1.0
    )
    assert [a.name for a in agents] == ["knobs", "llm-attention", "llm-weight-layout", "llm", "llm-2"]
    knobs, attention, layout = agents[0], agents[1], agents[2]
    assert isinstance(knobs, KnobSearcher) and knobs.config.seed == 7
    assert isinstance(attention, LLMAgent) and attention.config.focus == "attention"
    assert isinstance(layout, LLMAgent) and layout.config.focus == "weight layout"
    assert layout.config.budget_usd == 1.0  # each agent has its own budget of the common size


def test_the_argument_of_knobs_is_the_base_family() -> None:
    [a, b] = make_agents("knobs:reference,knobs:reference", seed=3)
    assert isinstance(a, KnobSearcher) and isinstance(b, KnobSearcher)
    assert [a.name, b.name] == ["knobs-reference", "knobs-reference-2"]
    assert (a.config.seed, b.config.seed) == (3, 4)  # alike searchers walk different paths


@pytest.mark.parametrize(
    ("spec", "settings", "message"),
    [
        ("", {}, "no generators"),
        ("knobs,genetic", {}, "no generator 'genetic'; generators: knobs, llm"),
        ("knobs", {"temprature": 0.5}, "no generator has the setting temprature"),
        ("knobs", {"name": "x"}, "no generator has the setting name"),
    ],
)
def test_bad_specs_are_refused(spec: str, settings: dict[str, object], message: str) -> None:
    with pytest.raises(PolyinferError, match=message):
        make_agents(spec, **settings)


def test_make_generator_refuses_settings_its_kind_lacks() -> None:
    with pytest.raises(PolyinferError, match="generator 'knobs' has no setting focus"):
        make_generator("knobs", focus="attention")


def test_only_the_first_knob_searcher_of_a_team_starts_at_the_defaults():
    team = make_agents("knobs:fast,knobs:fast,knobs:fast", seed=0)
    assert [a.config.start_at_defaults for a in team] == [True, False, False]
