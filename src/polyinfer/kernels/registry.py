"""The kernel registry: name -> (Triton launcher, PyTorch reference, declared knobs), for knob searchers.

Each kernel is the module `polyinfer.kernels.<name>`, which defines a launcher function of the same
name, a `reference` taking the same data arguments (the launcher adds its knobs as keyword-only
arguments, one per `KNOBS` key) and `KNOBS = {knob: [choice, ...]}`. The defaults suit an H200 in
bfloat16; any assignment from the choices computes the same result, but a few large tiles at large M
exceed shared memory and raise Triton's `OutOfResources` on launch: a searcher scores those as invalid.
Modules import Triton, so they are imported only on `load`; listing the names needs no Triton.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from polyinfer.errors import PolyinferError

KERNEL_NAMES = (
    "rms_norm",
    "gemv",
    "rope_kv_write",
    "paged_decode_attention",
    "paged_prefill_attention",
    "silu_mul",
    "lm_head_argmax",
)


@dataclass(frozen=True, slots=True)
class Kernel:
    name: str
    launch: Callable[..., Any]
    reference: Callable[..., Any]
    knobs: Mapping[str, list[int]]


def load(name: str) -> Kernel:
    """The named kernel; raises PolyinferError for an unknown name or when Triton is not installed."""
    if name not in KERNEL_NAMES:
        raise PolyinferError(f"no kernel {name!r}; kernels: {', '.join(KERNEL_NAMES)}")
    try:
        module = importlib.import_module(f"polyinfer.kernels.{name}")
    except ModuleNotFoundError as e:
        if e.name != "triton":
            raise
        raise PolyinferError(
            "Triton is not installed; the kernels need the 'kernels' extra: pip install 'polyinfer[kernels]'"
        ) from None
    return Kernel(name, getattr(module, name), module.reference, module.KNOBS)
