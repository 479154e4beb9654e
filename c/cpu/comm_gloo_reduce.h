/* comm_gloo_reduce.h: the element-wise reductions the Gloo collectives apply, one per shim
 * dtype and collective op, in the shape Gloo takes (out, a, b, count); out may alias a or b. */
#ifndef MONARCH_SHIM_COMM_GLOO_REDUCE_H
#define MONARCH_SHIM_COMM_GLOO_REDUCE_H

#include <cstddef>
#include <cstdint>

using shim_reduce_fn = void (*)(void *out, const void *a, const void *b, size_t n);

/* The reduction of op over dtype (SHIM_OP_AVG reduces as a sum; shim_divide finishes it).
 * Fails with SHIM_E_UNSUPPORTED (message naming `what`) for a pair this backend cannot do. */
int shim_comm_reduce_fn(const char *what, int32_t dtype, int32_t op, shim_reduce_fn *out);

/* data[i] /= divisor for n elements of dtype (integers truncate): the second half of AVG. */
void shim_comm_divide(int32_t dtype, void *data, size_t n, int32_t divisor);

#endif
