#!/usr/bin/env bash
# Installs the test tooling and runs lint, type checks and the CPU test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh "kernels,test,dev"
python3 -m ruff check src tests benchmarks
python3 -m mypy
python3 -m pytest "$@"
