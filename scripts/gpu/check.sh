#!/usr/bin/env bash
# scripts/gpu/check.sh: the one script a session runs on a lent GPU machine (an H200: 16 cores,
# torch with its nvidia nccl/cublas pip packages, nothing downloadable). From the repo root:
#
#   source .gpu/env.sh && bash scripts/gpu/check.sh            (../shared/gpu/pack.sh makes .gpu/)
#
# Steps, each logged to $OUT/<step>.log (OUT: the device tool's folder, else /tmp/monarch-gpu-logs), each
# run even when an earlier one failed, with a summary and a nonzero exit if any failed:
#   environment  what the machine has: GPU, driver, nvcc, torch, the NCCL and cuBLAS found
#   build        make cuda, printing nvcc's output (zero warnings: -Werror)
#   tests        MONARCH_DEVICE=cuda bun test tests/cuda tests/shim (tests/cuda: stream ordering,
#                the NCCL loader, and every op against the cpu backend)
#   bench        bun run bench/cuda.ts (elementwise vs copy, bf16 matmul vs torch, NCCL, alloc)
#   alloc_nocache  the alloc section again with the allocator's cache off, for comparison
# Hooks for later steps (store vs torch 2.11, worker overhead): write a step_<name> function
# below and add <name> to STEPS. Keep the whole run within a few minutes: the device budget
# is 15 minutes including the machine's start.
set -uo pipefail

OUT=${OUT:-/tmp/monarch-gpu-logs}
mkdir -p "$OUT"
export MONARCH_DEVICE=cuda
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} # NCCL's own account of a failure, into the logs

# Finds NCCL and cuBLAS in the python packages when env.sh did not (CUDA 13 wheels put them
# under nvidia/cu13/lib rather than nvidia/<lib>/lib).
find_lib() {
  python3 - "$1" <<'PY' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    hits = sorted(glob.glob(os.path.join(root, "nvidia", "**", sys.argv[1]), recursive=True))
    if hits:
        print(hits[-1]); break
PY
}
[ -n "${MONARCH_NCCL_LIB:-}" ] || export MONARCH_NCCL_LIB="$(find_lib 'libnccl.so.2')"
[ -n "${MONARCH_CUBLAS_LIB:-}" ] || export MONARCH_CUBLAS_LIB="$(find_lib 'libcublas.so.*[0-9]')"
[ -n "${MONARCH_CUBLASLT_LIB:-}" ] || export MONARCH_CUBLASLT_LIB="$(find_lib 'libcublasLt.so.*[0-9]')"

step_environment() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  nvcc --version | tail -n 2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' || true
  echo "MONARCH_NCCL_LIB=${MONARCH_NCCL_LIB:-}"
  echo "MONARCH_CUBLAS_LIB=${MONARCH_CUBLAS_LIB:-}"
  echo "MONARCH_CUBLASLT_LIB=${MONARCH_CUBLASLT_LIB:-}"
  bun --version
}

step_build() {
  rm -f build/libshim-cuda.so
  make -j"$(nproc)" cuda
}

step_tests() {
  timeout 420 bun test tests/cuda tests/shim
}

step_bench() {
  timeout 300 bun run bench/cuda.ts --json "$OUT/bench.json"
}

step_alloc_nocache() {
  MONARCH_CUDA_CACHE=0 timeout 120 bun run bench/cuda.ts --only alloc
}

STEPS=(environment build tests bench alloc_nocache)

declare -A status
for name in "${STEPS[@]}"; do
  echo "=== $name"
  start=$SECONDS
  "step_$name" 2>&1 | tee "$OUT/$name.log"
  status[$name]=${PIPESTATUS[0]}
  echo "=== $name: exit ${status[$name]} after $((SECONDS - start)) s"
done

echo "=== summary"
failed=0
for name in "${STEPS[@]}"; do
  echo "$name: ${status[$name]}"
  [ "${status[$name]}" = 0 ] || failed=1
done
exit $failed
