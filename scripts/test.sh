#!/usr/bin/env bash
# The tests in one command, from a fresh clone: make (or reuse) a venv, install as README.md says (scripts/env.sh says
# how: VENV, TORCH_INDEX_URL, PANDAS), fetch the test data, run the suite. Arguments go to pytest. In an environment
# already set up, `python -m pytest` is all it takes.
set -euo pipefail
. "$(dirname "$0")/env.sh" "[test]"
# MovieLens 100K for the tests (only its data files are read), and Triton's model-config schema (test_export parses
# export_triton's config.pbtxt with it: one generated protobuf module, on the protobuf that onnx brings), unless this
# venv has them. --no-deps: nothing else of either is used, and tritonclient's pins (ml-dtypes<=0.5.4) would hold
# back what onnx needs
want() { [ "$(pip show "$1" 2>/dev/null | sed -n 's/^Version: //p')" = "$2" ] || pip install -q --no-deps "$1==$2"; }
want recbole 1.2.1
want tritonclient 2.73.0
python -c 'import pandas, torch, fastai
print(f"pandas {pandas.__version__}, torch {torch.__version__}, fastai {fastai.__version__}")'
python -m pytest "$@"
