# Sourced by test.sh and demo.sh: make (or reuse) a venv and install the package as README.md says, torch pinned first.
#   VENV=path         the venv to make or reuse (default .venv)
#   TORCH_INDEX_URL=  where torch comes from, e.g. https://download.pytorch.org/whl/cpu for the CPU build on a laptop
#   PANDAS=2.3|3.1    hold pandas at that line (default: what pip gives, in a new venv the newest allowed)
# $1: the extras to install, e.g. "[test]" (default none).
# A stamp in the venv records what was installed: a digest of this file and pyproject.toml, PANDAS, TORCH_INDEX_URL and
# the extras. A run that the stamp covers runs no pip: the same digest, PANDAS and TORCH_INDEX_URL as recorded where
# they are set (unset, whatever was installed does), and its extras among those installed, so demo.sh (no extra) after
# test.sh ("[test]") installs nothing. Any other run installs; the stamp then keeps the extras installed before it,
# unless the digest changed. The package is installed editable: edits to its code need no install. Delete the stamp to
# force one.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
. "$VENV/bin/activate"
stamp="$VENV/.fastai_gpu_tabular-install"
digest=$(cat scripts/env.sh pyproject.toml | sha256sum | cut -d' ' -f1)
case "${1:-}" in ''|\[*\]) ;; *) echo "env.sh: \$1 is the extras, as \"[test]\" or \"\": not '$1'" >&2; return 2 ;; esac
extras=${1:-}; extras=${extras#[}; extras=${extras%]}   # "[test,tf]" -> "test,tf"
had() { sed -n "s/^$1=//p" "$stamp" 2>/dev/null || true; }   # a field of the stamp: "name=value" a line
covered=1
[ "$(had digest)" = "$digest" ] || covered=0
[ -z "${PANDAS:-}" ] || [ "$(had pandas)" = "$PANDAS" ] || covered=0
[ -z "${TORCH_INDEX_URL:-}" ] || [ "$(had torch)" = "$TORCH_INDEX_URL" ] || covered=0
for e in ${extras//,/ }; do case ",$(had extras)," in *",$e,"*) ;; *) covered=0 ;; esac; done
if [ "$covered" = 1 ]; then
  installed=$(had extras)
  echo "env.sh: $VENV has the package installed (extras: ${installed:-none}) for these settings: no pip" \
       "(a change to pyproject.toml reinstalls)"
else
  kept='' was_pandas='' was_torch=''
  if [ "$(had digest)" = "$digest" ]; then kept=$(had extras) was_pandas=$(had pandas) was_torch=$(had torch); fi
  echo "env.sh: installing into $VENV: pip, torch 2.13, the package -e \".${extras:+[$extras]}\"" \
       "${PANDAS:+and pandas $PANDAS }(later runs that need no more skip pip)"
  python -m pip install -q --upgrade pip
  # torch first, pinned: then `-e .` keeps it, rather than pulling the newest torch with several GB of CUDA wheels
  pip install -q torch==2.13.0 torchvision==0.28.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
  pip install -q -e ".${extras:+[$extras]}"
  if [ -n "${PANDAS:-}" ]; then pip install -q "pandas==$PANDAS.*"; fi
  all=$(printf '%s\n' ${kept//,/ } ${extras//,/ } | sed '/^$/d' | sort -u | paste -sd, -)
  printf 'digest=%s\npandas=%s\ntorch=%s\nextras=%s\n' "$digest" "${PANDAS:-$was_pandas}" \
         "${TORCH_INDEX_URL:-$was_torch}" "$all" > "$stamp"
fi
