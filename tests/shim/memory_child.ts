// Run by memory.test.ts in a process of its own: the memory limit is the whole process's, and in
// the test process other files' tensors may be freed or made while it is measured. Prints what
// it saw as JSON.
import { ShimError } from "../../ffi/native.ts"
import { empty, native } from "./helpers.ts"

const refusal = (fn: () => unknown): { reason: string; op: string; message: string } | null => {
  try {
    fn()
    return null
  } catch (e) {
    if (!(e instanceof ShimError)) throw e
    return { reason: e.reason, op: e.op, message: e.message }
  }
}

const base = native.memoryUsage().inUse
native.setMemoryLimit(base + (1 << 20))
const limit = native.memoryUsage().limit - base
const held = empty("u8", [768 << 10])
const over = refusal(() => empty("u8", [512 << 10]))
const inUseAfter = native.memoryUsage().inUse - base
const smaller = refusal(() => empty("u8", [256 << 10]))
held.free()
const freedRoom = refusal(() => empty("u8", [512 << 10]))
// 3e9 f32 per rank (12 GB) was the reported case: refused at once, nothing taken.
const huge = refusal(() => empty("f32", [3e9]))
console.log(JSON.stringify({ limit, over, inUseAfter, smaller, freedRoom, huge }))
