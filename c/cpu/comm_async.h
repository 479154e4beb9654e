// comm_async.h: what comm_gloo.cc tells comm_async.c (not part of the ABI).
#ifndef MONARCH_SHIM_CPU_COMM_ASYNC_H
#define MONARCH_SHIM_CPU_COMM_ASYNC_H

#include "../common/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* c is being destroyed (its started all-reduces are all done): its communication thread ends. */
void shim_cpu_comm_closing(const shim_comm *c);

#ifdef __cplusplus
}
#endif

#endif
