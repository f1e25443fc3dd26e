#!/usr/bin/env bash
# The main job on the small embedded default (the `ci` model config): model-check the spec.
# Later steps of the chain (traces, conform, report) join here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/zabref check --config ci "$@"
