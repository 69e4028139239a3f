"""Budget: the tokens and dollars an LLM agent may spend, charged from each reply's `usage`."""

from __future__ import annotations

import threading

from polyinfer.errors import PolyinferError

CHARS_PER_TOKEN = 4  # for endpoints that report no usage: a rough count beats spending unmetered


class Budget:
    """Spend so far against optional limits; the request that crosses a limit is the last one."""

    def __init__(
        self,
        max_tokens: int | None = None,
        max_usd: float | None = None,
        usd_per_mtok_prompt: float = 0.0,
        usd_per_mtok_completion: float = 0.0,
    ) -> None:
        if (max_tokens is not None and max_tokens <= 0) or (max_usd is not None and max_usd <= 0):
            raise PolyinferError("an LLM budget must be positive")
        if usd_per_mtok_prompt < 0 or usd_per_mtok_completion < 0:
            raise PolyinferError("token prices cannot be negative")
        self.max_tokens, self.max_usd = max_tokens, max_usd
        self.prices = (usd_per_mtok_prompt, usd_per_mtok_completion)
        self.spent_tokens = 0
        self.spent_usd = 0.0
        self._lock = threading.Lock()

    def charge(self, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self.spent_tokens += prompt_tokens + completion_tokens
            self.spent_usd += (prompt_tokens * self.prices[0] + completion_tokens * self.prices[1]) / 1e6

    @staticmethod
    def estimate(text: str) -> int:
        return -(-len(text) // CHARS_PER_TOKEN)

    @property
    def exhausted(self) -> bool:
        over_tokens = self.max_tokens is not None and self.spent_tokens >= self.max_tokens
        return over_tokens or (self.max_usd is not None and self.spent_usd >= self.max_usd)

    def describe(self) -> str:
        tokens = f"{self.spent_tokens:,}" + (
            f" of {self.max_tokens:,}" if self.max_tokens is not None else ""
        )
        usd = f"${self.spent_usd:.4f}" + (f" of ${self.max_usd:.4f}" if self.max_usd is not None else "")
        return f"{tokens} tokens, {usd}"
