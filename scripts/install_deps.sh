#!/usr/bin/env bash
# Installs what ddptrain needs from Debian's apt, only what is missing.
# Idempotent and non-interactive; uses sudo when not root.
set -euo pipefail
pkgs=(cmake ninja-build g++ ccache make pkg-config
      libtorch-dev libgloo-dev nlohmann-json3-dev libtomlplusplus-dev zlib1g-dev
      libgtest-dev googletest python3 python3-pip python3-venv python3-torch dataset-fashion-mnist iproute2 procps bsdutils)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python readers the interop tests check our files with (PyPI), for Debian's python3 (which
# has torch 1.13): installed into .pydeps next to this script's repository, never into the
# system (pip --target leaves Debian's packages alone).
root="$(cd "$(dirname "$0")/.." && pwd)"
pydeps=(safetensors==0.8.0)
if ! PYTHONPATH="$root/.pydeps" /usr/bin/python3 -c 'import safetensors.numpy' 2>/dev/null; then
  echo "install_deps: pip installing ${pydeps[*]} into $root/.pydeps"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --target "$root/.pydeps" "${pydeps[@]}"
fi
# TensorBoard's own reader, for the event-file test. Its numpy 2 must not shadow Debian's
# numpy under torch 1.13, so it lives apart and is used without torch (python3 -s).
if ! PYTHONPATH="$root/.pydeps-tb" /usr/bin/python3 -s -c 'import tensorboard.backend.event_processing.event_accumulator' 2>/dev/null; then
  echo "install_deps: pip installing tensorboard==2.21.0 into $root/.pydeps-tb"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --target "$root/.pydeps-tb" tensorboard==2.21.0
fi
