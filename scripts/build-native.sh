#!/bin/sh
# Builds the native library (build/libshim-cpu.so, and build/libshim-cuda.so when nvcc is
# found) where the package is installed. Run on install (postinstall, where the package manager
# allows this package's scripts) and by `monarch-bun build`. Without the toolchain or the
# libraries it says what is missing: on install it then leaves the install alone (the worker
# says the same when it starts); with --required it fails.
cd "$(dirname "$0")/.." || exit 1
[ -f build/libshim-cpu.so ] && [ "$1" != --required ] && exit 0
missing=""
for tool in make gcc g++; do command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"; done
[ -f /usr/include/gloo/allreduce.h ] || missing="$missing libgloo-dev"
[ -f /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || [ -f /usr/include/cblas.h ] || missing="$missing libopenblas-dev"
if [ -n "$missing" ]; then
  echo "monarch-bun: cannot build the native library, missing:$missing (Debian: apt-get install$missing)." >&2
  echo "monarch-bun: then run \`monarch-bun build\`, or set MONARCH_SHIM_DIR to a folder holding libshim-cpu.so." >&2
  [ "$1" = --required ] && exit 1
  exit 0
fi
echo "monarch-bun: building the native library in $(pwd)/build"
# The cpu library first, so it is there even while nvcc (minutes) builds the cuda one.
if ! { make -j2 cpu && make -j2 all; } >build-native.log 2>&1; then
  tail -20 build-native.log >&2
  echo "monarch-bun: building the native library failed (log: $(pwd)/build-native.log)" >&2
  [ "$1" = --required ] && exit 1
  exit 0
fi
rm -f build-native.log
