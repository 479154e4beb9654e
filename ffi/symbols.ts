/**
 * The bun:ffi symbol table of c/shim.h, declaration for declaration and in the same order.
 * tests/ffi/symbols.test.ts parses the header and fails on any difference in a name, an
 * argument count or a type. Mapping: int and int32_t -> i32, int64_t -> i64, uint64_t ->
 * u64, double -> f64, const char * argument -> cstring, any other pointer -> ptr.
 */
import { FFIType, type FFIFunction } from "bun:ffi"

const { i32, i64, u64, f64, ptr, cstring } = FFIType

export const symbols = {
  shim_last_error: { args: [], returns: cstring },
  shim_probe: { args: [], returns: i32 },
  shim_device_count: { args: [ptr], returns: i32 },
  shim_set_device: { args: [i32], returns: i32 },
  shim_memory_total: { args: [ptr], returns: i32 },
  shim_set_memory_limit: { args: [i64], returns: i32 },
  shim_memory_usage: { args: [ptr, ptr], returns: i32 },
  shim_memory_reserve: { args: [cstring, i64], returns: i32 },
  shim_memory_release: { args: [i64], returns: i32 },
  shim_set_threads: { args: [i32], returns: i32 },
  shim_set_block_cache: { args: [i32], returns: i32 },
  shim_set_comm_shm: { args: [i32], returns: i32 },
  shim_set_library: { args: [cstring, cstring], returns: i32 },

  shim_tensor_alloc: { args: [i32, i32, ptr, ptr], returns: i32 },
  shim_tensor_view: { args: [ptr, i64, i32, ptr, ptr], returns: i32 },
  shim_tensor_free: { args: [ptr], returns: i32 },
  shim_tensor_copy_in: { args: [ptr, ptr, i64, ptr], returns: i32 },
  shim_tensor_copy_out: { args: [ptr, ptr, i64, ptr], returns: i32 },
  shim_tensor_host_data: { args: [ptr, ptr], returns: i32 },

  shim_fill: { args: [ptr, f64, ptr], returns: i32 },
  shim_arange: { args: [ptr, f64, f64, ptr], returns: i32 },
  shim_rand: { args: [ptr, u64, u64, i32, ptr], returns: i32 },

  shim_unary: { args: [i32, ptr, ptr, ptr], returns: i32 },
  shim_binary: { args: [i32, ptr, ptr, ptr, ptr], returns: i32 },
  shim_binary_scalar: { args: [i32, ptr, ptr, f64, i32, ptr], returns: i32 },
  shim_ternary: { args: [i32, ptr, ptr, ptr, ptr, f64, ptr], returns: i32 },
  shim_reduce: { args: [i32, ptr, ptr, i32, ptr], returns: i32 },
  shim_argreduce: { args: [i32, ptr, ptr, i32, ptr], returns: i32 },
  shim_cumsum: { args: [ptr, ptr, i32, ptr], returns: i32 },
  shim_cumulative: { args: [i32, ptr, ptr, ptr, i32, ptr], returns: i32 },
  shim_sort: { args: [ptr, ptr, ptr, i32, i32, ptr], returns: i32 },
  shim_searchsorted: { args: [ptr, ptr, ptr, i32, ptr], returns: i32 },
  shim_matmul: { args: [ptr, ptr, ptr, i32, ptr], returns: i32 },
  shim_cast: { args: [ptr, ptr, ptr], returns: i32 },
  shim_transpose: { args: [ptr, ptr, i32, i32, ptr], returns: i32 },
  shim_copy_strided: { args: [ptr, i64, ptr, ptr, i64, ptr, i32, ptr, ptr], returns: i32 },
  shim_gather: { args: [ptr, ptr, i32, ptr, ptr], returns: i32 },
  shim_softmax: { args: [ptr, ptr, i32, i32, ptr], returns: i32 },
  shim_layer_norm: { args: [ptr, ptr, ptr, ptr, i64, f64, ptr], returns: i32 },
  shim_index_select: { args: [ptr, ptr, i32, ptr, ptr], returns: i32 },

  shim_triangle: { args: [ptr, ptr, i64, i32, ptr], returns: i32 },
  shim_attention: { args: [ptr, ptr, ptr, ptr, ptr, f64, i32, ptr], returns: i32 },
  shim_rms_norm: { args: [ptr, ptr, ptr, i64, f64, ptr], returns: i32 },
  shim_dropout: { args: [ptr, ptr, ptr, f64, u64, u64, ptr], returns: i32 },
  shim_scatter: { args: [i32, ptr, i32, ptr, ptr, ptr], returns: i32 },
  shim_nll_loss: { args: [ptr, ptr, ptr, ptr, i64, i32, ptr], returns: i32 },
  shim_mse_loss: { args: [ptr, ptr, ptr, i32, ptr], returns: i32 },
  shim_cat: { args: [ptr, i32, ptr, i32, ptr], returns: i32 },
  shim_index_add: { args: [ptr, i32, ptr, ptr, f64, ptr], returns: i32 },
  shim_sgd: { args: [ptr, ptr, ptr, f64, f64, f64, f64, i32, ptr], returns: i32 },
  shim_adamw: { args: [ptr, ptr, ptr, ptr, ptr, f64, f64, f64, f64, f64, i64, i32, ptr], returns: i32 },

  shim_stream_create: { args: [ptr], returns: i32 },
  shim_stream_destroy: { args: [ptr], returns: i32 },
  shim_stream_synchronize: { args: [ptr], returns: i32 },
  shim_event_create: { args: [ptr], returns: i32 },
  shim_event_destroy: { args: [ptr], returns: i32 },
  shim_event_record: { args: [ptr, ptr], returns: i32 },
  shim_stream_wait_event: { args: [ptr, ptr], returns: i32 },
  shim_event_query: { args: [ptr, ptr], returns: i32 },
  shim_event_synchronize: { args: [ptr], returns: i32 },
  shim_debug_stream_spin: { args: [ptr, i64], returns: i32 },

  shim_comm_create: { args: [i32, i32, i64, cstring, ptr], returns: i32 },
  shim_comm_address: { args: [ptr, ptr, i64, ptr], returns: i32 },
  shim_comm_connect: { args: [ptr, ptr, ptr], returns: i32 },
  shim_comm_destroy: { args: [ptr], returns: i32 },
  shim_comm_transport: { args: [ptr], returns: cstring },
  shim_all_reduce: { args: [ptr, ptr, ptr, i32, ptr], returns: i32 },
  shim_all_gather: { args: [ptr, ptr, ptr, ptr], returns: i32 },
  shim_reduce_scatter: { args: [ptr, ptr, ptr, i32, ptr], returns: i32 },
  shim_all_to_all: { args: [ptr, ptr, ptr, ptr], returns: i32 },
  shim_broadcast: { args: [ptr, ptr, i32, ptr], returns: i32 },
  shim_barrier: { args: [ptr, ptr], returns: i32 },
  shim_p2p: { args: [ptr, i32, ptr, ptr, ptr, ptr], returns: i32 },
} as const satisfies Record<string, FFIFunction>

// The header's enums, generated from it (scripts/abi.ts).
export { ALL_DIMS, BinaryOp, BinaryOpFlags, CommOp, LossReduction, MatmulFlag, MAX_DIMS, OpFlag, OptimFlag, P2P, ReduceOp, ScatterOp, ShimStatus, TernaryOp, UnaryOp, UnaryOpFlags } from "./abi.ts"
export type { BinaryOpName, CommOpName, LossReductionName, ReduceOpName, ScatterOpName, TernaryOpName, UnaryOpName } from "./abi.ts"
