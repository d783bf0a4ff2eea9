#!/usr/bin/env bash
# The main job in one command, from a fresh clone: make (or reuse) a venv, install as README.md says (scripts/env.sh
# says how: VENV, TORCH_INDEX_URL, PANDAS), then run the demo. Arguments go to `python -m fastai_gpu_tabular`
# (--help lists them). In an environment already set up, `python -m fastai_gpu_tabular` is all it takes.
set -euo pipefail
. "$(dirname "$0")/env.sh" ""   # no extra (an empty $1: else the sourced file would see the demo's arguments)
python -m fastai_gpu_tabular "$@"
