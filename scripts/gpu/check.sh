#!/usr/bin/env bash
# scripts/gpu/check.sh: the one script a session runs on a lent GPU machine (an H200: 16 cores,
# torch with its nvidia nccl/cublas pip packages, nothing downloadable). From the repo root:
#
#   source .gpu/env.sh && bash scripts/gpu/check.sh            (../shared/gpu/pack.sh makes .gpu/)
#
# Steps, each logged to $OUT/<step>.log (OUT: the device tool's folder, else /tmp/monarch-gpu-logs), each
# run even when an earlier one failed, then one summary table (scripts/gpu/summary.ts, also
# $OUT/summary.md) and a nonzero exit if any step failed. In order, figures first, with the
# seconds we expect on the H200 (estimates until a run has measured them) and their limit:
#   environment    what the machine has: GPU, driver, nvcc, torch, the NCCL and cuBLAS found   ~5 s / 60
#   build          make cuda, printing nvcc's output (zero warnings: -Werror)                  ~60 s / 240
#   bench          bun run bench/cuda.ts (elementwise vs copy, bf16 matmul vs torch, NCCL      ~40 s / 240
#                  all_reduce at world size 1, alloc) -> $OUT/bench.json
#   overhead       bench/dispatch.ts with the worker on this device: microseconds per command  ~30 s / 150
#                  of a one-element ops.neg, single and in groups of 64 -> $OUT/overhead.json
#   store          scripts/gpu/store_probe.ts (the store's findings against this torch)         ~60 s / 240
#                  -> $OUT/store_findings.*, then tests/store/torch.test.ts with TORCH_PYTHON
#   tests          bun test tests/cuda tests/shim (stream ordering, the NCCL loader, every op   ~60-200 s / 300
#                  and every collective of a one-member NCCL communicator against the cpu backend)
#   alloc_nocache  the alloc section again with the allocator's cache off, for comparison      ~10 s / 90
# Every limit is also cut to what is left of CHECK_BUDGET_S (default 480 s, so the whole run
# fits one 10-minute device command with room to spare); a step with under 10 s left is skipped.
#
# Knobs: CHECK_STEPS="bench store" runs a subset; MONARCH_DEVICE=cpu with TORCH_PYTHON=/usr/bin/python3
# dry-runs the overhead and store steps on a machine without a GPU (the GPU steps fail cleanly);
# OVERHEAD_N sets the commands per round of the overhead step (default 50000).
# To add a step: write a step_<name> function below and add <name> to STEPS.
set -uo pipefail

OUT=${OUT:-/tmp/monarch-gpu-logs}
mkdir -p "$OUT"
export MONARCH_DEVICE=${MONARCH_DEVICE:-cuda}
export TORCH_PYTHON=${TORCH_PYTHON:-python3}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} # NCCL's own account of a failure, into the logs
command -v bun >/dev/null || export PATH="$PWD/node_modules/.bin:$PATH"
CHECK_BUDGET_S=${CHECK_BUDGET_S:-480}
DEADLINE=$(($(date +%s) + CHECK_BUDGET_S))

# Finds NCCL and cuBLAS in the python packages when env.sh did not (CUDA 13 wheels put them
# under nvidia/cu13/lib rather than nvidia/<lib>/lib).
find_lib() {
  "$TORCH_PYTHON" - "$1" <<'PY' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    hits = sorted(glob.glob(os.path.join(root, "nvidia", "**", sys.argv[1]), recursive=True))
    if hits:
        print(hits[-1]); break
PY
}
# A path that names no file (env.sh guessing a wheel layout this machine does not have) would
# make the shim try only it and fail every cuda step, so it counts as unset.
for var in MONARCH_NCCL_LIB MONARCH_CUBLAS_LIB MONARCH_CUBLASLT_LIB; do
  [ -f "${!var:-}" ] || unset "$var"
done
[ -n "${MONARCH_NCCL_LIB:-}" ] || export MONARCH_NCCL_LIB="$(find_lib 'libnccl.so.2')"
[ -n "${MONARCH_CUBLAS_LIB:-}" ] || export MONARCH_CUBLAS_LIB="$(find_lib 'libcublas.so.*[0-9]')"
[ -n "${MONARCH_CUBLASLT_LIB:-}" ] || export MONARCH_CUBLASLT_LIB="$(find_lib 'libcublasLt.so.*[0-9]')"

# Runs a command for at most $1 seconds, or what is left of the budget when that is less.
limited() {
  local limit=$1 left=$((DEADLINE - $(date +%s)))
  shift
  ((left < limit)) && limit=$left
  if ((limit < 5)); then
    echo "check.sh: the ${CHECK_BUDGET_S} s budget is spent; not running: $*"
    return 124
  fi
  timeout -k 10 "$limit" "$@"
  local rc=$?
  ((rc == 124 || rc == 137)) && echo "check.sh: stopped at its ${limit} s limit: $*"
  return $rc
}

step_environment() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  nvcc --version | tail -n 2
  limited 60 "$TORCH_PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-")' || true
  echo "MONARCH_DEVICE=$MONARCH_DEVICE TORCH_PYTHON=$TORCH_PYTHON"
  echo "MONARCH_NCCL_LIB=${MONARCH_NCCL_LIB:-}"
  echo "MONARCH_CUBLAS_LIB=${MONARCH_CUBLAS_LIB:-}"
  echo "MONARCH_CUBLASLT_LIB=${MONARCH_CUBLASLT_LIB:-}"
  bun --version
}

step_build() {
  rm -f build/libshim-cuda.so
  limited 240 make -j"$(nproc)" cuda
}

step_bench() {
  limited 240 bun run bench/cuda.ts --json "$OUT/bench.json"
}

step_overhead() {
  limited 150 bun run bench/dispatch.ts "${OVERHEAD_N:-50000}" --device "$MONARCH_DEVICE" --json "$OUT/overhead.json"
}

# The probe first: its findings are what the run is for; the interop tests then check our
# client and server against the same torch.
step_store() {
  local rc=0
  limited 90 bun run scripts/gpu/store_probe.ts --out "$OUT" || rc=1
  limited 150 bun test tests/store/torch.test.ts || rc=1
  return $rc
}

step_tests() {
  limited 300 bun test tests/cuda tests/shim
}

step_alloc_nocache() {
  MONARCH_CUDA_CACHE=0 limited 90 bun run bench/cuda.ts --only alloc
}

STEPS=(environment build bench overhead store tests alloc_nocache)
[ -z "${CHECK_STEPS:-}" ] || read -ra STEPS <<<"$CHECK_STEPS"

declare -A status
: >"$OUT/steps.tsv"
for name in "${STEPS[@]}"; do
  start=$SECONDS
  if ((DEADLINE - $(date +%s) < 10)); then
    echo "=== $name: skipped, the ${CHECK_BUDGET_S} s budget is spent"
    status[$name]=skipped
  else
    echo "=== $name"
    "step_$name" 2>&1 | tee "$OUT/$name.log"
    status[$name]=${PIPESTATUS[0]}
    echo "=== $name: exit ${status[$name]} after $((SECONDS - start)) s"
  fi
  printf '%s\t%s\t%s\n' "$name" "${status[$name]}" "$((SECONDS - start))" >>"$OUT/steps.tsv"
done

echo "=== summary (also $OUT/summary.md)"
timeout 30 bun run scripts/gpu/summary.ts "$OUT" || echo "check.sh: the summary failed; the steps' logs are in $OUT"
failed=0
for name in "${STEPS[@]}"; do
  [ "${status[$name]}" = 0 ] || failed=1
done
exit $failed
