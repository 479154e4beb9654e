#!/usr/bin/env bash
# Installs what one command needs, saying what it does, and only what is missing: Debian
# packages and the npm packages (Bun itself comes from npm). The mode says which command:
#   build   Gloo, OpenBLAS, iproute2 and the npm packages
#   demo    build's, and torch 1.13 (the demo compares its losses with a torch twin)
#   bench   build's, and torch 1.13 (a benchmark compares with torch.distributed)
#   test    demo's, chromium (the trace viewer's test draws it headless), and slurm-wlm and
#           munge (the SLURM tests run slurmctld, slurmd and munged here); the default
# MONARCH_NO_TORCH=1, MONARCH_NO_BROWSER=1 and MONARCH_NO_SLURM=1 leave those out (what needs
# them then skips).
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-test}"
case "$mode" in
  build) torch=0; browser=0; slurm=0 ;;
  demo|bench) torch=1; browser=0; slurm=0 ;;
  test) torch=1; browser=1; slurm=1 ;;
  *) echo "setup: unknown mode '$mode' (build, demo, bench or test)" >&2; exit 2 ;;
esac
[ "${MONARCH_NO_TORCH:-0}" != 1 ] || torch=0
[ "${MONARCH_NO_BROWSER:-0}" != 1 ] || browser=0
[ "${MONARCH_NO_SLURM:-0}" != 1 ] || slurm=0

missing=()
[ -f /usr/include/gloo/allreduce.h ] || missing+=(libgloo-dev)
[ -f /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || [ -f /usr/include/cblas.h ] || missing+=(libopenblas-dev)
command -v ip >/dev/null || missing+=(iproute2)
if [ "$browser" = 1 ] && ! command -v chromium >/dev/null; then missing+=(chromium); fi
if [ "$torch" = 1 ] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then missing+=(python3-torch); fi
if [ "$slurm" = 1 ] && ! command -v srun >/dev/null; then missing+=(slurm-wlm munge); fi
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
