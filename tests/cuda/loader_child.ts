// Child of loader.test.ts: in a fresh process (the shim loads NCCL once per process), asks the
// cuda shim for a communicator, which loads NCCL before touching the device, and prints the
// status and error text as JSON.
import { dlopen } from "bun:ffi"
import { libraryPath } from "../../ffi/native.ts"
import { symbols } from "../../ffi/symbols.ts"

const { symbols: shim } = dlopen(libraryPath("cuda"), symbols)
const out = new BigUint64Array(1)
const status = shim.shim_comm_create(0, 1, 1000, "", out)
console.log(JSON.stringify({ status, error: String(shim.shim_last_error()) }))
