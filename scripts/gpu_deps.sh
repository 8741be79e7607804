#!/usr/bin/env bash
# Bundles the build dependencies the GPU machine lacks (it has CUDA, torch 2.x, cmake, ninja
# and a compiler, but no apt packages) from this Debian machine into .gpudeps/, keeping
# their install layout so their CMake config files work there: nlohmann-json, toml++ (its
# shared library), GoogleTest (static), Gloo's headers (LibTorch's ProcessGroupGloo.hpp
# includes them), zlib, and the nccl.h of the NCCL release pip's torch pins. .gpudeps is
# git-ignored; the device tool carries it
# (carry: [".gpudeps"]). With --binary it also carries ddptrain and its CUDA tests built here
# against the GPU machine's pip torch (2.11.0, or $TORCH2_VERSION; the build-2.11 folder of
# `make build-2.11`, CUDA and NCCL compiled in) in .gpudeps/bin,
# with the torch version they were built against: gpu-check.sh uses them when that torch is
# the GPU machine's and they start there, and builds there otherwise (minutes of device time
# saved). Usage: scripts/gpu_deps.sh [--binary]  (then see scripts/gpu-check.sh)
set -euo pipefail
case "${1:-}" in
  "" | --binary) ;;
  *) echo "gpu_deps: unknown argument '$1' (usage: scripts/gpu_deps.sh [--binary])" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
# The GPU machine's torch (2.11.0+cu130; it cannot install another), not the default build's.
export TORCH2_VERSION=${TORCH2_VERSION:-2.11.0}
gpu_build=${GPU_BUILD:-build-$(echo "$TORCH2_VERSION" | cut -d. -f1-2)}
d=.gpudeps
arch=lib/x86_64-linux-gnu
rm -rf "$d"
mkdir -p "$d/include" "$d/$arch/cmake" "$d/share/cmake"
for pkg in nlohmann-json3-dev libtomlplusplus-dev libgtest-dev libgloo-dev zlib1g-dev libturbojpeg0-dev libjpeg62-turbo-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || { echo "gpu_deps: $pkg is not installed (run scripts/install_deps.sh)" >&2; exit 1; }
done
cp -r /usr/include/nlohmann /usr/include/toml++ /usr/include/gtest /usr/include/gloo "$d/include/"
cp /usr/include/zlib.h /usr/include/zconf.h "$d/include/"
cp -r /usr/share/cmake/nlohmann_json "$d/share/cmake/"
cp -r /usr/$arch/cmake/tomlplusplus /usr/$arch/cmake/GTest "$d/$arch/cmake/"
# GoogleTest's config includes its GMock targets only when present (OPTIONAL): without
# libgmock.a beside them they would stop the configure, and we use no gmock.
rm -f "$d/$arch/cmake/GTest/GMockTargets"*.cmake
# Real files, not links (links may not travel).
cp -L /usr/$arch/libtomlplusplus.so.3 "$d/$arch/libtomlplusplus.so.3"
cp -L /usr/$arch/libtomlplusplus.so "$d/$arch/libtomlplusplus.so"
cp /usr/$arch/libgtest.a /usr/$arch/libgtest_main.a /usr/$arch/libz.a "$d/$arch/"
# The image decoders' libraries (data/image_decode.cpp): the GPU machine has neither
# libturbojpeg nor libjpeg.so.62 (its libjpeg is release 80, another ABI), so the binary and a
# build there both take Debian's, headers included, from here.
for lib in libjpeg.so.62 libturbojpeg.so.0; do
  cp -L /usr/$arch/$lib "$d/$arch/$lib"
  cp -L /usr/$arch/$lib "$d/$arch/${lib%.*}"
done
cp /usr/include/turbojpeg.h /usr/include/jpeglib.h /usr/include/jerror.h /usr/include/jmorecfg.h \
  /usr/include/$(basename $arch)/jconfig.h "$d/include/"
# The nccl.h of the NCCL that pip's torch pins (the nvidia-nccl wheel next to torch): a header
# from another NCCL release changes the size of ncclConfig_t inside ProcessGroupNCCL's options,
# silent memory corruption rather than a compile error (See Note [NCCL header] in
# CMakeLists.txt, which checks the version at configure time).
py=$(./scripts/torch2_python.sh)
nccl_inc=$("$py" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "include"))')
cp -r "$nccl_inc"/. "$d/include/"
echo "gpu_deps: nccl.h $(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$d/include/nccl.h" | paste -sd.) from $nccl_inc"
if [ "${1:-}" = --binary ]; then
  cmake --build "$gpu_build" --target ddptrain ddptrain_cuda_tests > /dev/null ||
    { echo "gpu_deps: the build in $gpu_build failed (run make build-2.11)" >&2; exit 1; }
  mkdir -p "$d/bin"
  cp "$gpu_build/ddptrain" "$gpu_build/ddptrain_cuda_tests" "$d/bin/"
  # Without their debug sections (24 MiB each at RelWithDebInfo; the symbols stay, so a
  # backtrace still names functions): the device tool carries 64 MiB in all.
  strip --strip-debug "$d/bin/ddptrain" "$d/bin/ddptrain_cuda_tests"
  "$py" -c 'import torch; print(torch.__version__)' > "$d/bin/torch_version"
  # What it was built from: the GPU check refuses it where the tree it runs in differs (a
  # binary older than the code would measure old code under the new commit's name).
  git rev-parse HEAD > "$d/bin/commit"
  git ls-files -z --cached --others --exclude-standard -- src tools include tests/cuda tests/common cmake CMakeLists.txt |
    xargs -0 sha256sum > "$d/bin/sources.sha256"
  echo "gpu_deps: ddptrain and ddptrain_cuda_tests built against torch $(cat "$d/bin/torch_version") in $d/bin"
fi
# The configs fall back to /usr when they find themselves there; elsewhere they compute the
# prefix from their own location, which is what we want.
du -sh "$d" | sed 's/^/gpu_deps: /'
# The device tool carries at most 64 MiB (all carried paths together): refuse a folder that
# would not arrive whole.
bytes=$(du -sb "$d" | cut -f1)
[ "$bytes" -le $((64 << 20)) ] ||
  { echo "gpu_deps: $d is $((bytes >> 20)) MiB, over the device tool's 64 MiB carry limit" >&2; exit 1; }
