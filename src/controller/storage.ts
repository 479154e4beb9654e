/**
 * What the controller knows of a tensor's memory on its workers: the storage it lies in (shared
 * by a tensor and its views, detach() and a borrow's alias included) and its layout there
 * (offset and strides, from the view ops' rules: TensorHandle.layout). Two uses:
 *
 * - the version counter (torch's): every write in place (an in-place op, copy_, an optimizer
 *   step, a user function's `mutates`, an in-place collective) adds one to its storage's count;
 *   the autograd tape notes the counts of what a node saved and refuses a backward that would
 *   read a tensor changed since;
 * - overlap: an in-place op whose input shares some, not all, of the memory it writes, or that
 *   writes an expanded tensor, is refused at the call, as torch refuses it, before anything is sent.
 */
import { overlapStatus, overlapsItself, WRITES_ONE_VALUE, type Strided } from "../ops/strided.ts"
import { ControllerError } from "./errors.ts"

/** One allocation on the workers: how many elements it holds (where known) and how many times it was written in place. */
export class Storage {
  version = 0
  constructor(readonly numel?: number) {}
}

/** What overlap needs of a tensor handle: its storage and its layout there (undefined where not known). */
export interface Placed {
  readonly storage: Storage
  readonly layout: Strided | undefined
}

/**
 * How two tensors' memory meets (torch's get_overlap_status, strided.ts): "none" for other
 * storages, or where either has gaps or repeats (torch's TooHard, which torch does not refuse);
 * a tensor whose layout the controller does not know overlaps fully only itself.
 */
const overlapOf = (a: Placed, b: Placed): "none" | "full" | "partial" => {
  if (a === b) return "full"
  if (a.storage !== b.storage) return "none"
  const x = a.layout, y = b.layout
  if (x === undefined || y === undefined) return "partial"
  const status = overlapStatus(x, y)
  return status === "unknown" ? "none" : status
}

/** torch's refusal of a write whose input shares the written memory. */
const overlapError = (op: string, written: object, input: object): ControllerError => new ControllerError({
  message: `${op}: unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory location (${input} and the written ${written}). Please clone() the tensor before performing the operation.`,
  reason: "overlap",
})

/** Every tensor handle in an argument tree (lists and keyword objects included). */
const tensorsIn = (v: unknown, into: Placed[]): Placed[] => {
  if (typeof v === "object" && v !== null && (v as Partial<Placed>).storage instanceof Storage) into.push(v as Placed)
  else if (Array.isArray(v)) for (const x of v) tensorsIn(x, into)
  else if (typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype) for (const k in v) tensorsIn((v as Record<string, unknown>)[k], into)
  return into
}

/**
 * Ops that refuse an input sharing any memory with what they write, the same elements
 * included (torch's assert_no_overlap for scatter_ and index_add_; the fused optimizer steps'
 * own checks); every other in-place op refuses only a partial overlap (torch's TensorIterator:
 * x.add_(x) is allowed).
 */
const NO_OVERLAP: ReadonlySet<string> = new Set(["scatter_", "scatter_add_", "index_add_", "_fused_sgd_", "_fused_adamw_"])

/**
 * Refuses a call of built-in `op` that writes an expanded tensor (two of its elements one memory
 * location, torch's assert_no_internal_overlap), or whose inputs share memory with a tensor it
 * writes, before anything is sent.
 */
export const refuseOverlap = (op: string, mutated: ReadonlyArray<Placed>, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>): void => {
  if (!WRITES_ONE_VALUE.has(op)) for (const w of mutated) {
    const l = w.layout
    if (l !== undefined && overlapsItself(l.shape, l.strides)) throw new ControllerError({
      message: `ops.${op}: unsupported operation: more than one element of the written-to tensor refers to a single memory location. Please clone() the tensor before performing the operation. (${w})`,
      reason: "overlap",
    })
  }
  const all = tensorsIn(kwargs, tensorsIn(args, []))
  if (all.length < 2) return
  const strict = NO_OVERLAP.has(op)
  for (const w of mutated) {
    let own = false
    for (const t of all) {
      // The written tensor's own place; a second one (x.add_(x)) overlaps it fully.
      if (t === w && !own) (own = true)
      else {
        const lap = overlapOf(w, t)
        if (lap === "partial" || (lap === "full" && strict)) throw overlapError(`ops.${op}`, w, t)
      }
    }
  }
}
