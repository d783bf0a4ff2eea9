#!/usr/bin/env bash
# The tests in one command, from a fresh clone: make (or reuse) a venv, install as README.md says (scripts/env.sh says
# how: VENV, TORCH_INDEX_URL, PANDAS), fetch the test data, run the suite. Arguments go to pytest. In an environment
# already set up, `python -m pytest` is all it takes.
set -euo pipefail
. "$(dirname "$0")/env.sh" "[test]"
# MovieLens 100K for the tests (only its data files are read), unless this venv has it
[ "$(pip show recbole 2>/dev/null | sed -n 's/^Version: //p')" = 1.2.1 ] || pip install -q --no-deps recbole==1.2.1
python -c 'import pandas, torch, fastai
print(f"pandas {pandas.__version__}, torch {torch.__version__}, fastai {fastai.__version__}")'
python -m pytest "$@"
