#!/usr/bin/env bash
# Prints the path of a Python that has pip's torch==$TORCH2_VERSION (default 2.15.0, PyPI's
# current: LibTorch 2.x with its CUDA and NCCL parts) and numpy (torch's tensor<->array
# interop, which the Python reference runs touch), installing them when missing. Progress goes
# to stderr.
#  - python3 on PATH when it already has that torch (the GPU machine's 2.11.0+cu130, which
#    cannot install another);
#  - else a virtual environment per version, ~/.cache/ddptrain/venv-torch-<version> (or under
#    $DDPTRAIN_VENV_DIR): several builds (2.15 the default, 2.11 the GPU machine's) live side
#    by side, clones share them, and Debian's python3 keeps its torch 1.13 from apt, which the
#    1.13 interop tests need untouched. Outside the source tree: CMake refuses an installed
#    target whose include path (the nvidia-nccl wheel's nccl.h) lies in the source tree.
set -euo pipefail
real() { "$1" -c 'import sys; print(sys.executable)'; }
want="${TORCH2_VERSION:-2.15.0}"
venv="${DDPTRAIN_VENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ddptrain}/venv-torch-$want"
has_torch() {
  "$1" -c "import sys, numpy, torch; sys.exit(torch.__version__.split('+')[0] != '$want')" 2>/dev/null
}
path_py="$(command -v python3 || true)"
for py in "$venv/bin/python" "$path_py"; do
  if [ -n "$py" ] && [ -x "$py" ] && has_torch "$py"; then real "$py"; exit 0; fi
done
echo "torch2_python: creating $(basename "$venv") with torch==$want numpy (pip, a few minutes)" >&2
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$want" numpy >&2
real "$venv/bin/python"
