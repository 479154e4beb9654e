/* loader.cu: finds NCCL and cuBLAS at run time with dlopen, fills their tables of entry points
 * through one macro, checks their versions, and remembers the outcome, so a missing library
 * makes every call that needs it fail with a status and the names tried, never a crash. The
 * library handles and tables, and the files shim_set_library chose, are this backend's only
 * process-wide state besides the allocator's cache (alloc.cu). Also the cuBLAS and NCCL failure
 * texts for check.h. */
#include <dlfcn.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

namespace {

/* One library's load, done once per process. */
template <typename Api>
struct Loaded {
  pthread_once_t once = PTHREAD_ONCE_INIT;
  int status = SHIM_OK;
  char why[900] = "";
  char path[256] = ""; /* the name that opened */
  Api api{};
};

Loaded<shim_nccl_api> nccl;
Loaded<shim_cublas_api> cublas;

/* shim_set_library's files by SHIM_LIBRARY_* ("": the usual names), and whether each library's
 * load has begun (then its file is fixed). */
struct Chosen {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  char path[3][512] = {};
  bool begun[3] = {};
};

Chosen chosen;

/* The file set for a library, copied into buf ("" for none); its load has begun from now on. */
void take_chosen(int32_t library, char *buf, size_t cap) {
  pthread_mutex_lock(&chosen.lock);
  snprintf(buf, cap, "%s", chosen.path[library]);
  chosen.begun[library] = true;
  pthread_mutex_unlock(&chosen.lock);
}

/* Appends printf-style text to a fixed buffer, truncating quietly. */
__attribute__((format(printf, 3, 4))) void append(char *buf, size_t cap, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, cap - used, fmt, ap);
  va_end(ap);
}

/* dlopens the file shim_set_library chose for `which` (SHIM_LIBRARY_*), else the first of
 * `names` that opens. On failure the library is unavailable and `why` says "<library> did not
 * load; tried " every name with dlerror's reason, then `hint` (what to set). */
template <typename Api, size_t N>
void *open_library(Loaded<Api> &lib, const char *library, int32_t which, const char *const (&names)[N],
                 const char *hint) {
  char file[512];
  take_chosen(which, file, sizeof file);
  const char *one = file;
  const char *const *candidates = names;
  size_t n = N;
  if (file[0] != '\0') {
    candidates = &one;
    n = 1;
  }
  snprintf(lib.why, sizeof lib.why, "%s did not load; tried ", library);
  for (size_t i = 0; i < n; i++) {
    void *handle = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (handle != NULL) {
      snprintf(lib.path, sizeof lib.path, "%s", candidates[i]);
      lib.why[0] = '\0';
      return handle;
    }
    const char *err = dlerror();
    append(lib.why, sizeof lib.why, "%s%s (%s)", i ? "; " : "", candidates[i], err ? err : "not found");
  }
  lib.status = SHIM_E_UNAVAILABLE;
  append(lib.why, sizeof lib.why, ". %s", hint);
  return NULL;
}

/* Fills table.name from the library, or records which symbol is missing and returns. */
#define SHIM_LOAD_SYM(lib, handle, name)                                                   \
  do {                                                                                     \
    (lib).api.name = reinterpret_cast<decltype((lib).api.name)>(dlsym((handle), #name));   \
    if ((lib).api.name == nullptr) {                                                       \
      (lib).status = SHIM_E_UNAVAILABLE;                                                   \
      snprintf((lib).why, sizeof (lib).why, "%s does not export %s", (lib).path, #name);   \
      return;                                                                              \
    }                                                                                      \
  } while (0)

void load_nccl(void) {
  static const char *const names[] = {"libnccl.so.2", "libnccl.so"};
  void *handle = open_library(nccl, "NCCL", SHIM_LIBRARY_NCCL, names,
                            "Set MONARCH_NCCL_LIB to libnccl.so.2 (PyTorch's pip install has it in "
                            "site-packages/nvidia/nccl/lib)");
  if (handle == NULL) return;
  SHIM_LOAD_SYM(nccl, handle, ncclGetVersion);
  SHIM_LOAD_SYM(nccl, handle, ncclGetUniqueId);
  SHIM_LOAD_SYM(nccl, handle, ncclCommInitRankConfig);
  SHIM_LOAD_SYM(nccl, handle, ncclCommGetAsyncError);
  SHIM_LOAD_SYM(nccl, handle, ncclCommFinalize);
  SHIM_LOAD_SYM(nccl, handle, ncclCommDestroy);
  SHIM_LOAD_SYM(nccl, handle, ncclCommAbort);
  SHIM_LOAD_SYM(nccl, handle, ncclGetErrorString);
  SHIM_LOAD_SYM(nccl, handle, ncclGetLastError);
  SHIM_LOAD_SYM(nccl, handle, ncclAllReduce);
  SHIM_LOAD_SYM(nccl, handle, ncclAllGather);
  SHIM_LOAD_SYM(nccl, handle, ncclReduceScatter);
  SHIM_LOAD_SYM(nccl, handle, ncclBroadcast);
  SHIM_LOAD_SYM(nccl, handle, ncclSend);
  SHIM_LOAD_SYM(nccl, handle, ncclRecv);
  SHIM_LOAD_SYM(nccl, handle, ncclGroupStart);
  SHIM_LOAD_SYM(nccl, handle, ncclGroupEnd);
  int v = 0;
  ncclResult_t r = nccl.api.ncclGetVersion(&v);
  if (r != ncclSuccess || v < SHIM_NCCL_MIN_VERSION || v >= 30000) {
    nccl.status = SHIM_E_UNAVAILABLE;
    snprintf(nccl.why, sizeof nccl.why,
             "%s reports NCCL version code %d (ncclGetVersion result %d); 2.14 or a later 2.x is "
             "needed. Set MONARCH_NCCL_LIB to a newer libnccl.so.2",
             nccl.path, v, (int)r);
    return;
  }
  nccl.api.version = v;
}

void load_cublas(void) {
  /* libcublas needs libcublasLt of the same release; loading it first, globally, satisfies
   * that dependency by soname when the two are not on the loader's search path. */
  char lt[512];
  take_chosen(SHIM_LIBRARY_CUBLASLT, lt, sizeof lt);
  if (lt[0] != '\0' && dlopen(lt, RTLD_NOW | RTLD_GLOBAL) == NULL) {
    const char *err = dlerror();
    cublas.status = SHIM_E_UNAVAILABLE;
    snprintf(cublas.why, sizeof cublas.why, "cuBLASLt did not load from %s (MONARCH_CUBLASLT_LIB; %s)",
             lt, err ? err : "not found");
    return;
  }
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
  void *handle = open_library(cublas, "cuBLAS", SHIM_LIBRARY_CUBLAS, names,
                            "Set MONARCH_CUBLAS_LIB (and MONARCH_CUBLASLT_LIB) to libcublas.so.N (PyTorch's pip "
                            "install has it in site-packages/nvidia/cublas/lib)");
  if (handle == NULL) return;
  SHIM_LOAD_SYM(cublas, handle, cublasGetProperty);
  SHIM_LOAD_SYM(cublas, handle, cublasGetStatusString);
  SHIM_LOAD_SYM(cublas, handle, cublasCreate_v2);
  SHIM_LOAD_SYM(cublas, handle, cublasSetStream_v2);
  SHIM_LOAD_SYM(cublas, handle, cublasGemmEx);
  SHIM_LOAD_SYM(cublas, handle, cublasGemmStridedBatchedEx);
  shim_cublas_api &api = cublas.api;
  if (api.cublasGetProperty(MAJOR_VERSION, &api.major) != CUBLAS_STATUS_SUCCESS ||
      api.cublasGetProperty(MINOR_VERSION, &api.minor) != CUBLAS_STATUS_SUCCESS ||
      api.cublasGetProperty(PATCH_LEVEL, &api.patch) != CUBLAS_STATUS_SUCCESS ||
      api.major < SHIM_CUBLAS_MIN_MAJOR) {
    cublas.status = SHIM_E_UNAVAILABLE;
    snprintf(cublas.why, sizeof cublas.why,
             "%s reports cuBLAS %d.%d.%d; %d or later is needed. Set MONARCH_CUBLAS_LIB to a newer one",
             cublas.path, api.major, api.minor, api.patch, SHIM_CUBLAS_MIN_MAJOR);
  }
}

}  // namespace

int shim_set_library(const char *which, const char *path) {
  int32_t library;
  SHIM_TRY(shim_check_library(which, path, &library));
  if (strlen(path) >= sizeof chosen.path[0])
    return shim_fail(SHIM_E_INVALID, "shim_set_library(%s): a path of %zu bytes (at most %zu)", which, strlen(path),
                     sizeof chosen.path[0] - 1);
  /* Once its load has begun, a library's file is fixed: setting the same one again is no change. */
  pthread_mutex_lock(&chosen.lock);
  bool fixed = chosen.begun[library] && strcmp(chosen.path[library], path) != 0;
  if (!chosen.begun[library]) snprintf(chosen.path[library], sizeof chosen.path[library], "%s", path);
  pthread_mutex_unlock(&chosen.lock);
  if (fixed) return shim_fail(SHIM_E_INVALID, "shim_set_library(%s): the library is loaded already (set it before shim_probe)", which);
  return SHIM_OK;
}

int shim_nccl_load(const shim_nccl_api **out) {
  pthread_once(&nccl.once, load_nccl);
  if (nccl.status != SHIM_OK) return shim_fail(nccl.status, "%s", nccl.why);
  *out = &nccl.api;
  return SHIM_OK;
}

int shim_cublas_load(const shim_cublas_api **out) {
  pthread_once(&cublas.once, load_cublas);
  if (cublas.status != SHIM_OK) return shim_fail(cublas.status, "%s", cublas.why);
  *out = &cublas.api;
  return SHIM_OK;
}

int shim_cublas_fail(cublasStatus_t st, const char *call, const char *file, int line) {
  /* Only reached after a successful load, so the table is there. */
  const char *text = cublas.api.cublasGetStatusString ? cublas.api.cublasGetStatusString(st) : "";
  int code = st == CUBLAS_STATUS_ALLOC_FAILED ? SHIM_E_NOMEM : SHIM_E_BACKEND;
  return shim_fail(code, "%s:%d: %s: %s (cuBLAS status %d)", file, line, call, text, (int)st);
}

int shim_nccl_fail(ncclResult_t r, ncclComm_t comm, const char *call, const char *file, int line) {
  const char *text = nccl.api.ncclGetErrorString ? nccl.api.ncclGetErrorString(r) : "";
  const char *last = nccl.api.ncclGetLastError ? nccl.api.ncclGetLastError(comm) : NULL;
  return shim_fail(SHIM_E_COMM, "%s:%d: %s: %s (NCCL result %d)%s%s", file, line, call, text, (int)r,
                   last && last[0] ? ": " : "", last && last[0] ? last : "");
}
