# Sourced by test.sh and demo.sh: make (or reuse) a venv and install the package as README.md says, torch pinned first.
#   VENV=path         the venv to make or reuse (default .venv)
#   TORCH_INDEX_URL=  where torch comes from, e.g. https://download.pytorch.org/whl/cpu for the CPU build on a laptop
#   PANDAS=2.3|3.0    hold pandas at that line (default: what pip gives, in a new venv the newest allowed)
# $1: the extras to install, e.g. "[test]" (default none).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
# torch first, pinned: then `-e .` keeps it, rather than pulling the newest torch with several GB of CUDA wheels
pip install -q torch==2.13.0 torchvision==0.28.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
pip install -q -e ".${1:-}"
if [ -n "${PANDAS:-}" ]; then pip install -q "pandas==$PANDAS.*"; fi
