/* nccl_api.h: the part of NCCL's API the cuda backend uses, declared here so the shim builds
 * without NCCL's headers (CI has none), plus the table of entry points loader.cu fills from
 * the library it dlopens. Values follow nccl.h of NCCL 2.14 and later; nothing older loads. */
#ifndef MONARCH_SHIM_NCCL_API_H
#define MONARCH_SHIM_NCCL_API_H

#include <limits.h>
#include <stddef.h>

#include <cuda_runtime.h>

typedef struct ncclComm *ncclComm_t;

enum { NCCL_UNIQUE_ID_BYTES = 128 };
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7 /* a non-blocking communicator is still working: poll ncclCommGetAsyncError */
} ncclResult_t;

typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

/* ncclConfig_t as of NCCL 2.14. NCCL reads `size` bytes of it and takes every field added
 * after `version` from its defaults, so this older layout stays valid in newer releases. */
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
} shim_nccl_config;

#define SHIM_NCCL_CONFIG_MAGIC 0xcafebeefu
#define SHIM_NCCL_CONFIG_UNDEF_INT INT_MIN
#define SHIM_NCCL_CONFIG_VERSION 21400u /* the layout above */
#define SHIM_NCCL_MIN_VERSION 21400     /* 2.14.0: non-blocking communicators, ncclCommFinalize */

/* Entry points by their NCCL names; loader.cu fills every one or reports the missing one. */
typedef struct shim_nccl_api {
  int version; /* ncclGetVersion's code, e.g. 22703 for 2.27.3 */
  ncclResult_t (*ncclGetVersion)(int *version);
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *id);
  ncclResult_t (*ncclCommInitRankConfig)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                         shim_nccl_config *config);
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t comm, ncclResult_t *state);
  ncclResult_t (*ncclCommFinalize)(ncclComm_t comm);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t comm);
  ncclResult_t (*ncclCommAbort)(ncclComm_t comm);
  const char *(*ncclGetErrorString)(ncclResult_t result);
  const char *(*ncclGetLastError)(ncclComm_t comm);
  ncclResult_t (*ncclAllReduce)(const void *send, void *recv, size_t count, ncclDataType_t type,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*ncclAllGather)(const void *send, void *recv, size_t sendcount, ncclDataType_t type,
                                ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*ncclReduceScatter)(const void *send, void *recv, size_t recvcount,
                                    ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                    cudaStream_t stream);
  ncclResult_t (*ncclBroadcast)(const void *send, void *recv, size_t count, ncclDataType_t type,
                                int root, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*ncclSend)(const void *send, size_t count, ncclDataType_t type, int peer,
                           ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*ncclRecv)(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                           cudaStream_t stream);
  ncclResult_t (*ncclGroupStart)(void);
  ncclResult_t (*ncclGroupEnd)(void);
} shim_nccl_api;

/* NCCL's table, loading the library on first use (MONARCH_NCCL_LIB, else libnccl.so.2, then
 * libnccl.so). A failed load is remembered: every later call fails the same way, with
 * SHIM_E_UNAVAILABLE and the names tried. */
int shim_nccl_load(const shim_nccl_api **out);

#endif
