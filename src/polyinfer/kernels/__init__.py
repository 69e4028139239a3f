"""Triton building blocks that candidates compose, one kernel per module, each beside its PyTorch reference.

Importing this package does not import Triton (the `kernels` extra); `registry.load` and importing a
kernel module do.
"""

from polyinfer.kernels.registry import KERNEL_NAMES, Kernel, load

__all__ = ["KERNEL_NAMES", "Kernel", "load"]
