#!/usr/bin/env bash
# The main job on the small embedded default (the `ci` model): the whole chain --
# model-check the spec, generate action-coverage traces from TLC's state graph on Spark, replay every trace
# (and the committed regression traces in traces/) on real zabref servers, and write the report.
#   bash scripts/main.sh                  # model ci
#   bash scripts/main.sh --config tiny    # any spec/MC_<name> model
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/zabref chain "$@"
