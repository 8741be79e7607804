#!/usr/bin/env bash
# Installs what ddptrain needs, only what is missing. Idempotent and non-interactive; uses
# sudo when not root.
#   scripts/install_deps.sh          the default build: Debian's build tools and libraries,
#                                    and pip's torch==$TORCH2_VERSION (default 2.15.0: its
#                                    LibTorch, with MKL, CUDA and NCCL) through
#                                    scripts/torch2_python.sh
#   scripts/install_deps.sh test     the default build and what its test suite also needs:
#                                    Debian's python3-torch 1.13, "the other torch" whose
#                                    torchrun E2E.UnderTheOtherTorchsTorchrunFailsInSeconds
#                                    runs the default build under
#   scripts/install_deps.sh debian   also the second build against Debian's LibTorch 1.13
#                                    (libtorch-dev, python3-torch), with OpenBLAS as the
#                                    system BLAS instead of the reference one
set -euo pipefail
mode=${1:-default}
case "$mode" in default | test | debian) ;; *)
  echo "install_deps: unknown build '$mode'; use: scripts/install_deps.sh [default|test|debian]" >&2
  exit 2
  ;;
esac
root="$(cd "$(dirname "$0")/.." && pwd)"
# libgloo-dev for both: pip's LibTorch ships no Gloo headers, which ProcessGroupGloo.hpp includes.
pkgs=(cmake ninja-build g++ ccache make pkg-config libgloo-dev nlohmann-json3-dev libtomlplusplus-dev
      zlib1g-dev libgtest-dev googletest python3 python3-pip python3-venv dataset-fashion-mnist iproute2
      procps bsdutils clang-format-14 libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev)
# Debian's LibTorch links libblas.so.3, which a fresh Debian machine points at the reference
# BLAS (a 12-20x slower matmul); libopenblas0-openmp registers OpenBLAS with a higher priority.
# python3-torchvision and python3-pil: the image tests' torchvision and Pillow for torch 1.13.
[ "$mode" = debian ] && pkgs+=(libtorch-dev python3-torch libopenblas0-openmp python3-torchvision python3-pil)
[ "$mode" = test ] && pkgs+=(python3-torch)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q 'install ok installed' || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ "$mode" = debian ]; then
  # A BLAS alternative set by hand to the reference BLAS stays in manual mode: point it at
  # OpenBLAS, saying so.
  alt=libblas.so.3-x86_64-linux-gnu
  openblas=/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3
  if [ "$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)" != "$(readlink -f "$openblas")" ]; then
    echo "install_deps: pointing $alt at OpenBLAS ($openblas)"
    $SUDO update-alternatives --quiet --set "$alt" "$openblas"
  fi
fi

# pip's torch 2.x: the build's LibTorch and the Python the interop tests talk to.
py2="$("$root/scripts/torch2_python.sh")"
# The image tests compare with torchvision (of that torch: --no-deps keeps its torch) and Pillow.
if [ "$mode" = test ] && ! "$py2" -c 'import torchvision, PIL' 2> /dev/null; then
  case "${TORCH2_VERSION:-2.15.0}" in
    2.15.* | 2.14.*) tv=0.29.2 ;;
    2.13.*) tv=0.28.0 ;;
    2.12.*) tv=0.27.1 ;;
    2.11.*) tv=0.26.0 ;;
    *) tv="" ;;
  esac
  if [ -z "$tv" ]; then
    echo "install_deps: no torchvision known for torch ${TORCH2_VERSION}: the image tests need one;" \
      "pip install it (the one of that torch) and pillow into $py2" >&2
  else
    echo "install_deps: pip installing torchvision==$tv pillow for $py2"
    "$py2" -m pip install --quiet --disable-pip-version-check --no-deps "torchvision==$tv" pillow
  fi
fi

# The Hugging Face tests (HfGpt2.*) compare with transformers itself (its own dependencies: the
# tokenizers, hub and safetensors packages; the venv's torch satisfies it and is kept).
if [ "$mode" = test ] && ! "$py2" -c 'import transformers' 2> /dev/null; then
  echo "install_deps: pip installing transformers==5.25.0 for $py2"
  "$py2" -m pip install --quiet --disable-pip-version-check transformers==5.25.0
fi

# Python readers the interop tests check our files with (PyPI), for Debian's python3:
# installed into .pydeps next to this script's repository, never into the system (pip
# --target leaves Debian's packages alone). Both Pythons are 3.11, so either can use it.
pydeps=(safetensors==0.8.0)
if ! PYTHONPATH="$root/.pydeps" /usr/bin/python3 -c 'import safetensors.numpy' 2> /dev/null; then
  echo "install_deps: pip installing ${pydeps[*]} into $root/.pydeps"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --target "$root/.pydeps" "${pydeps[@]}"
fi
# TensorBoard's own reader, for the event-file test. Its numpy 2 must not shadow Debian's
# numpy under torch 1.13, so it lives apart and is used without torch (python3 -s).
if ! PYTHONPATH="$root/.pydeps-tb" /usr/bin/python3 -s -c 'import tensorboard.backend.event_processing.event_accumulator' 2> /dev/null; then
  echo "install_deps: pip installing tensorboard==2.21.0 into $root/.pydeps-tb"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --target "$root/.pydeps-tb" tensorboard==2.21.0
fi
