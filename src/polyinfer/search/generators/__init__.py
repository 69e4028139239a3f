"""Generators (agents) propose candidates from board snapshots; see `base.Generator` for the contract."""

from polyinfer.search.generators.base import Generator, Notebook
from polyinfer.search.generators.knobs import KnobConfig, KnobSearcher
from polyinfer.search.generators.llm import LLMAgent, LLMConfig
from polyinfer.search.generators.registry import GENERATORS, make_agents, make_generator

__all__ = [
    "GENERATORS",
    "Generator",
    "KnobConfig",
    "KnobSearcher",
    "LLMAgent",
    "LLMConfig",
    "Notebook",
    "make_agents",
    "make_generator",
]
