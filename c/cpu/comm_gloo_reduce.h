/* comm_gloo_reduce.h: the element-wise reductions the Gloo collectives apply, one per shim
 * dtype and collective op, in the shape Gloo takes (out, a, b, count); out may alias a or b. */
#ifndef MONARCH_SHIM_COMM_GLOO_REDUCE_H
#define MONARCH_SHIM_COMM_GLOO_REDUCE_H

#include <cstddef>
#include <cstdint>

using shim_reduce_fn = void (*)(void *out, const void *a, const void *b, size_t n);

/* The reduction of op over dtype (SHIM_OP_AVG reduces as a sum; shim_comm_divide finishes it),
 * for a pair shim_check_all_reduce or shim_check_reduce_scatter accepted (internal.h). */
shim_reduce_fn shim_comm_reduce_fn(int32_t dtype, int32_t op);

/* data[i] /= divisor for n elements of dtype (integers truncate): the second half of AVG. */
void shim_comm_divide(int32_t dtype, void *data, size_t n, int32_t divisor);

#endif
