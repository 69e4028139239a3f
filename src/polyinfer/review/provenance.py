"""Provenance: what an artifact was verified and measured against, and whether that still holds here.

An artifact is stale when the model's weights or the hardware differ from what it records: its
verification and its speedup were established for those, and prove nothing about others. Library
versions are recorded for the reviewer but do not make an artifact stale.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

from polyinfer.models.load import LoadedModel, load_model
from polyinfer.traffic.profile import WorkloadProfile

_SOURCE_PREFIXES = ("preset:", "default:")


class Hardware(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: str  # "cpu" or "cuda"
    name: str  # the GPU's name, or the CPU's model name
    count: int  # GPUs visible (CPU: logical cores)

    @classmethod
    def current(cls, device: str) -> Hardware:
        if device.startswith("cuda"):
            if not torch.cuda.is_available():
                return cls(kind="cuda", name="(no CUDA device)", count=0)
            return cls(
                kind="cuda",
                name=torch.cuda.get_device_name(torch.device(device)),
                count=torch.cuda.device_count(),
            )
        return cls(kind="cpu", name=_cpu_name(), count=os.cpu_count() or 1)


class Provenance(BaseModel):
    model_config = ConfigDict(frozen=True)

    model_ref: str | None  # what `load_model` takes to load the same model again
    model_source: str
    weights_hash: str
    num_layers: int
    dtype: str
    device: str
    spec: dict[str, Any]
    workload: dict[str, Any] | None
    hardware: Hardware
    versions: dict[str, str]
    git_commit: str | None

    @classmethod
    def collect(
        cls, model: LoadedModel, dtype: str, device: str, profile: WorkloadProfile | None
    ) -> Provenance:
        return cls(
            model_ref=model_ref(model.source),
            model_source=model.source,
            weights_hash=model.weights_hash,
            num_layers=model.spec.num_layers,
            dtype=dtype,
            device=device,
            spec=model.spec.to_json(),
            workload=profile.model_dump(mode="json") if profile else None,
            hardware=Hardware.current(device),
            versions=_versions(),
            git_commit=_git_commit(),
        )

    def stale_reasons(self, weights_hash: str, hardware: Hardware) -> list[str]:
        """Why an artifact with this provenance no longer applies to `weights_hash` on `hardware`."""
        reasons = []
        if weights_hash != self.weights_hash:
            reasons.append(
                f"the model changed (weights {self.weights_hash[:12]} then, {weights_hash[:12]} now)"
            )
        if (hardware.kind, hardware.name) != (self.hardware.kind, self.hardware.name):
            reasons.append(f"the hardware changed ({self.hardware.name} then, {hardware.name} now)")
        return reasons

    def current_weights_hash(self, ref: str | None = None) -> str:
        """The weights hash of `ref` (default: the recorded model) as loaded here, with the recorded dtype.

        Only one layer is loaded: file fingerprints and preset identities do not depend on truncation.
        """
        device = self.device if Hardware.current(self.device).count else "cpu"
        dtype = getattr(torch, self.dtype)
        return load_model(
            ref if ref is not None else self.model_ref, dtype=dtype, device=device, num_layers=1
        ).weights_hash


def model_ref(source: str) -> str:
    """The `load_model` reference for a LoadedModel's source ("preset:tiny-llama" -> "tiny-llama")."""
    for prefix in _SOURCE_PREFIXES:
        if source.startswith(prefix):
            return source[len(prefix) :]
    return source


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    for package in ("triton", "polyinfer"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "absent"
    return out


def _git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None
