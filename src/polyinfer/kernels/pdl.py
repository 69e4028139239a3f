"""Programmatic dependent launch (PDL, Hopper and later): a kernel starts while its predecessor finishes.

At batch 1 a decode step is ~190 short kernels whose launch and ramp-up sit between the previous
kernel's last blocks and their own first loads. A kernel launched with PDL may be scheduled as soon as
every block of the kernel before it has signalled (or exited); it then does what cannot depend on
that kernel (address math, loads of model weights, which no kernel writes) and waits
(`griddepcontrol.wait`, which also makes the predecessor's writes visible) before reading its inputs. Each kernel here signals its
own dependents right after that wait, so ordering stays transitive: a kernel that may start has every
kernel before its predecessor complete. CUDA graphs keep the programmatic edges.

The wait and signal are PTX, which Triton's CPU interpreter cannot run: `enabled` turns PDL off
there (and on GPUs before sm90), so the same launcher serves both.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl


def enabled(pdl: bool, like: torch.Tensor) -> bool:
    """Whether a launch asked to use PDL can: CUDA tensors on compute capability 9.0 or later."""
    return pdl and like.is_cuda and _hopper_or_later(like.device)


@functools.cache
def _hopper_or_later(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device)[0] >= 9


def launch_options(use: bool) -> dict[str, bool]:
    """Launch keywords: none without PDL, so such launches are exactly what they were before it."""
    return {"launch_pdl": True} if use else {}


@triton.jit
def wait_then_release(PDL: tl.constexpr):
    """Wait for the predecessor's writes, then let the successor start launching."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
