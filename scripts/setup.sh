#!/usr/bin/env bash
# Installs what the build and the tests need, saying what it does, and only what is missing:
# Debian packages (Gloo, OpenBLAS; torch 1.13 for the interop tests unless MONARCH_NO_TORCH=1;
# chromium for the trace viewer's test unless MONARCH_NO_BROWSER=1; slurm-wlm and munge for
# the SLURM tests unless MONARCH_NO_SLURM=1)
# and the npm packages (Bun itself comes from npm).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
[ -f /usr/include/gloo/allreduce.h ] || missing+=(libgloo-dev)
[ -f /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || [ -f /usr/include/cblas.h ] || missing+=(libopenblas-dev)
command -v ip >/dev/null || missing+=(iproute2)
# The trace viewer's test draws it in headless Chromium.
if [ "${MONARCH_NO_BROWSER:-0}" != 1 ] && ! command -v chromium >/dev/null; then missing+=(chromium); fi
if [ "${MONARCH_NO_TORCH:-0}" != 1 ] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  missing+=(python3-torch)
fi
# The SLURM tests run slurmctld, slurmd and munged here (tests/slurm install them too).
if [ "${MONARCH_NO_SLURM:-0}" != 1 ] && ! command -v srun >/dev/null; then missing+=(slurm-wlm munge); fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then
    echo "setup: missing Debian packages ${missing[*]}; install them as root" >&2; exit 1
  fi
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x node_modules/.bin/bun ] || [ package.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm packages (effect, @msgpack/msgpack, bun, typescript)"
  npm install --no-audit --no-fund --loglevel=error
fi
