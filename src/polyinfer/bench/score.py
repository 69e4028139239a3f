"""The score the search optimises: a workload's predicted output tokens per second, from step times."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polyinfer.bench.shapes import Phase, ShapeMix, StepShape


@dataclass(frozen=True, slots=True)
class Prediction:
    """Full-model serving figures predicted from step times; 0 for a phase the workload lacks."""

    decode_tok_s: float
    prefill_tok_s: float
    output_tok_s: float  # the score
    tpot_ms: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def predict(mix: ShapeMix, step_s: Mapping[StepShape, float]) -> Prediction:
    """Predict serving throughput from the seconds one step of each of `mix`'s shapes takes.

    Per token, a phase costs the weighted mean over its shapes of step time / tokens in the step:

        decode_s  = sum_w  w * t / batch          prefill_s = sum_w  w * t / chunk

    An average request costs `mix.prefill_tokens * prefill_s + mix.decode_tokens * decode_s` seconds of
    engine time and yields `mix.output_tokens` tokens, so the score is

        output_tok_s = output_tokens / (prefill_tokens * prefill_s + decode_tokens * decode_s)

    which is what a saturated replay of the workload measures as output tok/s, up to the work a step
    does outside the forward pass (scheduling, sampling) and the packing of prefills beside decodes.
    The predicted TPOT is the token-weighted decode step time.
    """
    per_token = {phase: sum(s.weight * step_s[s] / s.tokens for s in mix.of_phase(phase)) for phase in Phase}
    decode_s, prefill_s = per_token[Phase.DECODE], per_token[Phase.PREFILL]
    request_s = mix.prefill_tokens * prefill_s + mix.decode_tokens * decode_s
    return Prediction(
        decode_tok_s=1 / decode_s if decode_s else 0.0,
        prefill_tok_s=1 / prefill_s if prefill_s else 0.0,
        output_tok_s=mix.output_tokens / request_s if request_s else 0.0,
        tpot_ms=1e3 * sum(s.weight * step_s[s] for s in mix.of_phase(Phase.DECODE)),
    )
