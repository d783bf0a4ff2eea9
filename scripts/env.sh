# Sourced by test.sh and demo.sh: make (or reuse) a venv and install the package as README.md says, torch pinned first.
#   VENV=path         the venv to make or reuse (default .venv)
#   TORCH_INDEX_URL=  where torch comes from, e.g. https://download.pytorch.org/whl/cpu for the CPU build on a laptop
#   PANDAS=2.3|3.1    hold pandas at that line (default: what pip gives, in a new venv the newest allowed)
# $1: the extras to install, e.g. "[test]" (default none).
# The install runs once per venv and settings: it is redone only when this file, pyproject.toml, the extras, PANDAS or
# TORCH_INDEX_URL change (the package itself is installed editable, so edits to its code need no install).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
. "$VENV/bin/activate"
stamp="$VENV/.fastai_gpu_tabular-install"
want="$(cat scripts/env.sh pyproject.toml | sha256sum | cut -d' ' -f1) extras=${1:-} pandas=${PANDAS:-} torch=${TORCH_INDEX_URL:-}"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "env.sh: $VENV is installed for these settings already: no pip (a change to pyproject.toml reinstalls)"
else
  echo "env.sh: installing into $VENV: pip, torch 2.13, the package -e \".${1:-}\"${PANDAS:+, pandas $PANDAS} (once)"
  python -m pip install -q --upgrade pip
  # torch first, pinned: then `-e .` keeps it, rather than pulling the newest torch with several GB of CUDA wheels
  pip install -q torch==2.13.0 torchvision==0.28.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
  pip install -q -e ".${1:-}"
  if [ -n "${PANDAS:-}" ]; then pip install -q "pandas==$PANDAS.*"; fi
  echo "$want" > "$stamp"
fi
