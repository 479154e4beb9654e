/* op_table.c: the rows of c/shim.h's op tables by code, for the checks and the backends'
 * dispatch. A code the table lacks (past its end, or a gap) has no row. Two rows with one code
 * do not compile (-Woverride-init, on with -Wextra). */
#include "internal.h"

#define ROW(id, code, name, flags) [code] = {name, flags},

static const shim_op_row unary[] = {SHIM_UNARY_OPS(ROW)};
static const shim_op_row binary[] = {SHIM_BINARY_OPS(ROW)};
static const shim_op_row ternary[] = {SHIM_TERNARY_OPS(ROW)};
static const shim_op_row reduce[] = {SHIM_REDUCE_OPS(ROW)};

static const shim_op_row *lookup(const shim_op_row *rows, int32_t count, int32_t op) {
  return op >= 0 && op < count && rows[op].name != NULL ? &rows[op] : NULL;
}

#define COUNT(rows) ((int32_t)(sizeof rows / sizeof rows[0]))

const shim_op_row *shim_unary_row(int32_t op) { return lookup(unary, COUNT(unary), op); }
const shim_op_row *shim_binary_row(int32_t op) { return lookup(binary, COUNT(binary), op); }
const shim_op_row *shim_ternary_row(int32_t op) { return lookup(ternary, COUNT(ternary), op); }
const shim_op_row *shim_reduce_row(int32_t op) { return lookup(reduce, COUNT(reduce), op); }

int shim_op_defined_on(const shim_op_row *row, int32_t dtype) {
  if (dtype <= SHIM_BF16) return 1;
  return (row->flags & (dtype == SHIM_BOOL ? SHIM_OPF_BOOL : SHIM_OPF_INT)) != 0;
}

int shim_fail_no_kernel(const char *fn, const char *name, int32_t op, int32_t dtype) {
  return shim_fail(SHIM_E_INVALID, "%s(%s): op code %d has no kernel for %s in this backend", fn, name ? name : "?", op,
                   shim_dtype_name(dtype));
}
