#!/usr/bin/env bash
# Installs what ddptrain needs from Debian's apt, only what is missing.
# Idempotent and non-interactive; uses sudo when not root.
set -euo pipefail
pkgs=(cmake ninja-build g++ ccache make pkg-config
      libtorch-dev libgloo-dev nlohmann-json3-dev libtomlplusplus-dev zlib1g-dev
      libgtest-dev googletest python3 python3-torch dataset-fashion-mnist iproute2 procps)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install_deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
