// Child of loader.test.ts: in a fresh process (the shim loads NCCL once per process), passes
// MONARCH_NCCL_LIB to the shim (shim_set_library), asks the cuda shim for a communicator, which loads NCCL before touching the device, and prints the
// status and error text as JSON.
import { dlopen } from "bun:ffi"
import { libraryPath } from "../../ffi/native.ts"
import { symbols } from "../../ffi/symbols.ts"

const { symbols: shim } = dlopen(libraryPath("cuda"), symbols)
// The library takes its settings through the ABI, as the worker's startup passes them.
const lib = process.env.MONARCH_NCCL_LIB
if (lib) shim.shim_set_library(Buffer.from("nccl\0"), Buffer.from(`${lib}\0`))
const out = new BigUint64Array(1)
const status = shim.shim_comm_create(0, 1, 1000, "", out)
console.log(JSON.stringify({ status, error: String(shim.shim_last_error()) }))
