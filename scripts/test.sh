#!/usr/bin/env bash
# The tests in one command, from a fresh clone: make (or reuse) a venv, install as README.md says (scripts/env.sh says
# how: VENV, TORCH_INDEX_URL, PANDAS), fetch the test data, run the suite. Arguments go to pytest. In an environment
# already set up, `python -m pytest` is all it takes.
set -euo pipefail
. "$(dirname "$0")/env.sh" "[test]"
pip install -q --no-deps recbole==1.2.1   # MovieLens 100K for the tests; only its data files are read
python -c 'import pandas, torch, fastai
print(f"pandas {pandas.__version__}, torch {torch.__version__}, fastai {fastai.__version__}")'
python -m pytest "$@"
