"""LLMAgent: a coding agent over any OpenAI-compatible chat completions endpoint.

Each `propose` sends one prompt built from the snapshot (see `prompt`) and turns the reply into at most
one proposal: the module in the reply, screened (see `search.screen`), with the reply's explanation as
its post. Everything that can go wrong with a remote model is expected, so none of it raises: timeouts,
unreachable endpoints, HTTP errors (429 and 5xx are retried by the SDK with backoff first), refusals,
replies with no code, code that fails screening. Each returns [] and keeps a 'failure' note. The agent is
exhausted when its token or dollar budget is spent, or after `max_failures_in_row` failed rounds in a
row (an endpoint that is down, or a model that cannot follow the contract, would otherwise be asked
forever).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import openai
from openai.types.chat import ChatCompletion

from polyinfer.board import TIERS, BoardSnapshot
from polyinfer.engine.candidate import Candidate
from polyinfer.errors import PolyinferError
from polyinfer.search.generators import prompt
from polyinfer.search.generators.base import Notebook
from polyinfer.search.generators.budget import Budget
from polyinfer.search.generators.reply import parse_reply
from polyinfer.search.proposal import Note, Proposal
from polyinfer.search.screen import screen


@dataclass(frozen=True, slots=True)
class LLMConfig:
    name: str = "llm"
    focus: str = ""
    base_url: str | None = None  # default: $POLYINFER_LLM_BASE_URL, then $OPENAI_BASE_URL
    model: str | None = None  # default: $POLYINFER_LLM_MODEL, then $OPENAI_MODEL
    api_key: str | None = None  # default: $POLYINFER_LLM_API_KEY, then $OPENAI_API_KEY, then "EMPTY"
    timeout: float = 300.0  # seconds per request
    max_retries: int = 2  # retries of 408/409/429/5xx and connection errors, with exponential backoff
    max_tokens: int | None = 16384  # completion tokens per reply
    temperature: float | None = None  # None: the endpoint's default
    budget_tokens: int | None = None  # prompt + completion tokens over all requests
    budget_usd: float | None = None
    usd_per_mtok_prompt: float = 0.0
    usd_per_mtok_completion: float = 0.0
    profile: str | None = None  # a per-operation profile of the incumbent, shown in every prompt
    tier: str = "fast"
    max_failures_in_row: int = 5

    def __post_init__(self) -> None:
        if self.timeout <= 0 or self.max_retries < 0 or self.max_failures_in_row < 1:
            raise PolyinferError(
                "the llm agent needs timeout > 0, max_retries >= 0, max_failures_in_row >= 1"
            )
        if self.tier not in TIERS:
            raise PolyinferError(f"tier {self.tier!r} is not one of {', '.join(TIERS)}")


def from_env(value: str | None, *names: str) -> str | None:
    return value or next((os.environ[n] for n in names if os.environ.get(n)), None)


class LLMAgent:
    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.name = config.name
        base_url = from_env(config.base_url, "POLYINFER_LLM_BASE_URL", "OPENAI_BASE_URL")
        model = from_env(config.model, "POLYINFER_LLM_MODEL", "OPENAI_MODEL")
        if not base_url or not model:
            raise PolyinferError(
                "the llm agent needs an endpoint and a model: pass base_url and model, or set "
                "POLYINFER_LLM_BASE_URL and POLYINFER_LLM_MODEL"
            )
        self.base_url, self.model = base_url, model
        # Local servers (vLLM, llama.cpp) accept any key; "EMPTY" is their convention.
        api_key = from_env(config.api_key, "POLYINFER_LLM_API_KEY", "OPENAI_API_KEY") or "EMPTY"
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=config.timeout, max_retries=config.max_retries
        )
        self.budget = Budget(
            config.budget_tokens,
            config.budget_usd,
            config.usd_per_mtok_prompt,
            config.usd_per_mtok_completion,
        )
        self.inputs = prompt.PromptInputs(config.name, config.focus, config.tier, config.profile)
        self._notes = Notebook()
        self._rounds = 0
        self._failures_in_row = 0

    @property
    def spent_tokens(self) -> int:
        return self.budget.spent_tokens

    @property
    def spent_usd(self) -> float:
        return self.budget.spent_usd

    @property
    def exhausted(self) -> bool:
        return self.budget.exhausted or self._failures_in_row >= self.config.max_failures_in_row

    def take_notes(self) -> list[Note]:
        return self._notes.take()

    def propose(self, snapshot: BoardSnapshot) -> list[Proposal]:
        if self.exhausted:
            return []
        self._rounds += 1
        messages = prompt.messages(snapshot, self.inputs)
        try:
            completion = self.client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=self.config.max_tokens if self.config.max_tokens is not None else openai.omit,
                temperature=self.config.temperature if self.config.temperature is not None else openai.omit,
            )
        except openai.APITimeoutError:
            return self._fail(f"the request to {self.base_url} timed out after {self.config.timeout:g} s")
        except openai.APIConnectionError as e:
            return self._fail(f"cannot reach {self.base_url}: {e.__cause__ or e}")
        except openai.APIStatusError as e:
            return self._fail(
                f"{self.base_url} answered HTTP {e.status_code}: {prompt.clip(str(e.message), 300)}"
            )
        except openai.OpenAIError as e:
            return self._fail(f"the request to {self.base_url} failed: {prompt.clip(str(e), 300)}")
        text = self._charge(completion, messages)
        if self.budget.exhausted:
            self._notes.add("note", f"budget spent ({self.budget.describe()}); this was the last request")
        return self._read(completion, text, snapshot)

    def _charge(self, completion: ChatCompletion, messages: list[dict[str, str]]) -> str:
        """Charge the reply to the budget and return its text."""
        choice = completion.choices[0] if completion.choices else None
        text = (choice.message.content if choice is not None else None) or ""
        usage = completion.usage
        if usage is not None:
            self.budget.charge(usage.prompt_tokens or 0, usage.completion_tokens or 0)
        else:
            sent = "".join(m["content"] for m in messages)
            self.budget.charge(Budget.estimate(sent), Budget.estimate(text))
        return text

    def _read(self, completion: ChatCompletion, text: str, snapshot: BoardSnapshot) -> list[Proposal]:
        choice = completion.choices[0] if completion.choices else None
        if choice is None:
            return self._fail("the reply has no choices")
        refusal = getattr(choice.message, "refusal", None)
        if choice.finish_reason == "content_filter" or refusal:
            return self._fail(
                f"the model refused ({choice.finish_reason}): {prompt.clip(refusal or text, 300)}"
            )
        reply = parse_reply(text)
        if reply.code is None:
            cut = " (cut off at max_tokens)" if choice.finish_reason == "length" else ""
            return self._fail(
                f"the reply holds no ```python block{cut}: {prompt.clip(text, 300) or '(empty)'}"
            )
        candidate = Candidate(reply.code, {}, f"{self.name}-{self._rounds}")
        verdict = screen(candidate)
        if not verdict.ok:
            return self._fail(f"{candidate.label} was rejected by screening: {'; '.join(verdict.reasons)}")
        if snapshot.candidate(candidate.hash) is not None:
            return self._fail(f"{candidate.label} is already on the board", (candidate.hash,))
        self._failures_in_row = 0
        parent = snapshot.incumbent.hash if snapshot.incumbent is not None else None
        return [Proposal(candidate, self.name, parent, reply.explanation or "(no explanation given)")]

    def _fail(self, text: str, refs: tuple[str, ...] = ()) -> list[Proposal]:
        self._failures_in_row += 1
        if self._failures_in_row >= self.config.max_failures_in_row:
            text += f"; stopping after {self._failures_in_row} failed rounds in a row"
        self._notes.add("failure", text, refs)
        return []
