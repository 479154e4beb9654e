// Run by threads.test.ts in a process of its own: its thread count before and after one large
// kernel at 2 threads, as JSON. In the test process itself an earlier file may already have
// started the pool, so the difference would say nothing there.
import { readFileSync } from "node:fs"
import * as ops from "../../ffi/ops.ts"
import { empty, native, tensor } from "./helpers.ts"

const threadCount = () => Number(/Threads:\s+(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))![1])
const n = 300_000
const x = tensor("f32", [n], Array.from({ length: n }, (_, i) => Math.sin(i)))
const o = empty("f32", [n])
native.setThreads(2)
const before = threadCount()
ops.unary("exp", o, x)
console.log(JSON.stringify({ before, after: threadCount() }))
