#!/usr/bin/env bash
# Prints the path of a Python that has pip's torch==$TORCH2_VERSION (LibTorch 2.x with its
# CUDA and NCCL parts) and numpy (torch's tensor<->array interop, which the Python reference
# runs touch), installing them when missing. Progress goes to stderr.
#  - python3 on PATH when it has that torch, or when it is not Debian's own python3 (then
#    `python3 -m pip install torch==...`, as on the GPU machine);
#  - else a virtual environment in .venv-torch2: Debian's python3 is externally managed and
#    carries torch 1.13 from apt, which the 1.13 interop tests need untouched.
set -euo pipefail
real() { "$1" -c 'import sys; print(sys.executable)'; }
want="${TORCH2_VERSION:-2.11.0}"
root="$(cd "$(dirname "$0")/.." && pwd)"
has_torch() {
  "$1" -c "import sys, numpy, torch; sys.exit(torch.__version__.split('+')[0] != '$want')" 2>/dev/null
}
path_py="$(command -v python3 || true)"
for py in "$root/.venv-torch2/bin/python" "$path_py"; do
  if [ -n "$py" ] && [ -x "$py" ] && has_torch "$py"; then real "$py"; exit 0; fi
done
if [ -n "$path_py" ] && [ "$(readlink -f "$path_py")" != "$(readlink -f /usr/bin/python3)" ]; then
  echo "torch2_python: pip installing torch==$want numpy into $path_py" >&2
  "$path_py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "torch==$want" numpy >&2
  real "$path_py"
  exit 0
fi
echo "torch2_python: creating .venv-torch2 with torch==$want" >&2
/usr/bin/python3 -m venv "$root/.venv-torch2" >&2
"$root/.venv-torch2/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$want" numpy >&2
echo "$root/.venv-torch2/bin/python"
