#!/usr/bin/env bash
# Installs polyinfer and runs the main job on its embedded default model and workload.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh kernels
exec polyinfer optimize "$@"
