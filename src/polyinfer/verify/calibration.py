"""The reference's own rounding error in half precision, which the logits tolerance scales with.

Two honest implementations of the same math in bfloat16 differ by the rounding each adds, and that
grows with depth: a fixed tolerance tuned on a 16-layer model fails honest candidates of a 32-layer
one. So before a half-precision battery, the reference runs once in its dtype and once in float32 on
the same weights (upcast, so the float32 run is the exact value of the half-precision model) on
fresh random prompts, teacher-forced onto the float32 tokens; the worst row's relative logits error is
the noise floor. A candidate may differ from the reference by `NOISE_FACTOR` times that (two
independent roundings add up to about 1.4x one; the rest is margin), and never by less than the
dtype's fixed tolerance. The canary check still has to fail: a battery made too lax by a large floor
fails every report.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from polyinfer.engine.engine import Engine
from polyinfer.models.load import LoadedModel
from polyinfer.models.weights import LayerWeights, Weights
from polyinfer.verify.comparison import compare, forced
from polyinfer.verify.config import Tolerance
from polyinfer.verify.context import VerifyContext
from polyinfer.verify.equivalence import pool_tokens
from polyinfer.verify.run import run

NOISE_FACTOR = 3.0


@dataclasses.dataclass(frozen=True, slots=True)
class NoiseFloor:
    rel_err: float | None  # None: not measured, and the dtype's fixed tolerance applies

    def tolerance(self, base: Tolerance) -> Tolerance:
        if self.rel_err is None:
            return base
        return dataclasses.replace(base, logits_rel=max(base.logits_rel, NOISE_FACTOR * self.rel_err))


def measure(ctx: VerifyContext) -> NoiseFloor:
    """The reference's worst-row relative logits error in `ctx.config.dtype` against float32."""
    config = ctx.config
    # float32 is compared to rounding; a tolerance the caller gave is theirs; without device memory for
    # a float32 copy of the weights the dtype's fixed bound has to do.
    if config.dtype == "float32" or config.tolerance is not None or not _room_for_float32_copy(ctx.model):
        return NoiseFloor(None)
    exact = dataclasses.replace(ctx.model, weights=_float32(ctx.model.weights))
    gen = ctx.generator()
    prompts = ctx.prompts(gen, ctx.lengths(gen, config.num_prompts))
    pool = pool_tokens(prompts, config.gen_tokens, config.block_size)
    wide = Engine(exact, config.engine_config(dtype="float32", kv_cache_tokens=pool))
    assert wide.forward is not None
    control = run(wide, wide.forward, prompts, config.gen_tokens)
    del wide, exact
    half = Engine(ctx.model, config.engine_config(kv_cache_tokens=pool))
    assert half.forward is not None
    err = compare(run(half, half.forward, prompts, config.gen_tokens, forced=forced(control)).traces,
                  control.traces).rel_err
    return NoiseFloor(err if math.isfinite(err) else None)  # non-finite reference logits: the fixed bound


def _float32(weights: Weights) -> Weights:
    """A float32 copy; tensors shared in the original (a tied LM head) stay shared."""
    done: dict[tuple[int, tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}

    def up(t: torch.Tensor) -> torch.Tensor:
        key = (t.data_ptr(), tuple(t.shape), t.stride())
        if key not in done:
            done[key] = t.float()
        return done[key]

    layers = tuple(
        dataclasses.replace(layer, **{f.name: up(t) for f in dataclasses.fields(LayerWeights)
                                      if (t := getattr(layer, f.name)) is not None})
        for layer in weights.layers
    )
    embed, norm, lm_head = up(weights.embed), up(weights.norm), up(weights.lm_head)
    return Weights(embed=embed, layers=layers, norm=norm, lm_head=lm_head)


def _room_for_float32_copy(model: LoadedModel) -> bool:
    device = model.weights.embed.device
    if device.type != "cuda":
        return True  # host memory: the copy is 2x a half-precision model, which the host already held
    free, _ = torch.cuda.mem_get_info(device)
    need = model.weights.nbytes * 4 // model.weights.embed.element_size()
    return need < free * 0.8
