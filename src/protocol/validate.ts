/**
 * Value validation: the checks the codec runs on every field, in both directions, and the
 * words its failures use. A failure is an Invalid naming where it sits, e.g.
 * "CallFunction.results[2]: expected Ref, got string". Everything is checked by hand
 * (Effect Schema costs too much per command).
 */
import { ExtData } from "@msgpack/msgpack"
import { ErrorPayload, FloatNumber, HostTensor, ITEM_SIZE, DTYPES, Ref, SharedTensor, type DType, type Frame } from "./values.ts"

/** The deepest a container may nest in a message, the message array itself being depth 1. */
export const MAX_DEPTH = 32
/** The most dims an NDSlice, TensorFactory or HostTensor may have on the wire. */
export const MAX_NDIM = 8
/** The bigints the wire carries: int64 and uint64. */
const INT64_MIN = -(1n << 63n)
const UINT64_MAX = (1n << 64n) - 1n
export const U32_MAX = 0xffff_ffff
const MAX_SAFE_BIGINT = BigInt(Number.MAX_SAFE_INTEGER)

/** Thrown inside the codec, caught at its entry. Not an Error: nothing to capture. */
export class Invalid {
  constructor(readonly where: string, readonly problem: string) {}
}

/**
 * What the library decoded where an ext payload (ext.ts) failed its layout check, or a str
 * was not UTF-8: the validator reports it where it sits.
 */
export class BadExt {
  constructor(readonly problem: string) {}
}

/**
 * How scan.ts marks a str that is not UTF-8: ext type -128 (reserved by msgpack, never valid
 * on this wire), payload [marker]; a genuine ext -128 in the same bytes gets payload [genuine].
 */
export const NOT_UTF8 = { type: -128, marker: 0, genuine: 1, problem: "not valid UTF-8" } as const

export const isNatural = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0

/** How a wrong value is named in a message: its msgpack kind, or its ext type. */
export const describe = (v: unknown): string => {
  switch (typeof v) {
    case "number": return Number.isInteger(v) ? `integer ${v}` : `float ${v}`
    case "string": return "string"
    case "object":
      if (v === null) return "nil"
      if (Array.isArray(v)) return "array"
      if (v instanceof Uint8Array) return "bin"
      if (v instanceof ExtData) return `ext type ${v.type}`
      if (v instanceof Date) return "timestamp"
      if (v instanceof FloatNumber) return `float ${v.value}`
      if (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null) return "map"
      return v.constructor?.name ?? "object"
    default: return typeof v
  }
}

/** "expected <what>, got <v>", or the problem v already is. */
export const expected = (what: string, v: unknown): string => (v instanceof BadExt ? v.problem : `expected ${what}, got ${describe(v)}`)

export const mismatch = (where: string, what: string, v: unknown): Invalid => new Invalid(where, expected(what, v))

const tooDeep = (where: string) => new Invalid(where, `nesting deeper than ${MAX_DEPTH}`)

export const shapeText = (dtype: string, shape: ReadonlyArray<number>) => `${dtype}[${shape.join(",")}]`

/** numel * itemsize, or -1 when it is not a safe integer. */
export const byteSize = (dtype: DType, shape: ReadonlyArray<number>): number => {
  let n = ITEM_SIZE[dtype]
  for (const d of shape) n *= d
  return Number.isSafeInteger(n) ? n : -1
}

/**
 * A fresh, exactly sized copy. NOTE: not `slice()`, which on a Node Buffer is a view; and
 * allocated uninitialised, as `set` overwrites all of it at once.
 */
export const copyOf = (b: Uint8Array): Uint8Array => {
  const c = Bun.allocUnsafe(b.byteLength)
  c.set(b)
  return c
}

// ---- scalar and container fields --------------------------------------------------------------

export const uint = (v: unknown, where: string): number => {
  if (isNatural(v)) return v
  if (typeof v === "bigint" && v >= 0n && v <= MAX_SAFE_BIGINT) return Number(v)
  // An integral float in an integer field is its value, as before floats were kept (a client whose msgpack writes every number as a float).
  if (v instanceof FloatNumber && isNatural(v.value)) return v.value
  throw mismatch(where, "unsigned integer", v)
}

export const str = (v: unknown, where: string): string => {
  if (typeof v === "string") return v
  throw mismatch(where, "string", v)
}

export const bool = (v: unknown, where: string): boolean => {
  if (typeof v === "boolean") return v
  throw mismatch(where, "boolean", v)
}

const isRef = (v: unknown): v is Ref => v instanceof Ref && isNatural(v.id)

export const ref = (v: unknown, where: string): Ref => {
  if (isRef(v)) return v
  throw mismatch(where, "Ref", v)
}

export const array = (v: unknown, where: string, depth: number): ReadonlyArray<unknown> => {
  if (!Array.isArray(v)) throw mismatch(where, "array", v)
  if (depth > MAX_DEPTH) throw tooDeep(where)
  return v
}

export const refs = (v: unknown, where: string, depth: number): ReadonlyArray<Ref> => {
  const a = array(v, where, depth)
  for (let i = 0; i < a.length; i++) if (!isRef(a[i])) throw mismatch(`${where}[${i}]`, "Ref", a[i])
  return a as ReadonlyArray<Ref>
}

export const uints = (v: unknown, where: string, depth: number): ReadonlyArray<number> => {
  const a = array(v, where, depth)
  for (let i = 0; i < a.length; i++) if (!isNatural(a[i])) return a.map((x, j) => uint(x, `${where}[${j}]`))
  return a as ReadonlyArray<number>
}

export const strs = (v: unknown, where: string, depth: number): ReadonlyArray<string> => {
  const a = array(v, where, depth)
  for (let i = 0; i < a.length; i++) if (typeof a[i] !== "string") throw mismatch(`${where}[${i}]`, "string", a[i])
  return a as ReadonlyArray<string>
}

/** One of `choices`, e.g. a reduction name. */
export const oneOf = <T extends string>(choices: ReadonlyArray<T>, what: string) => (v: unknown, where: string): T => {
  if ((choices as ReadonlyArray<unknown>).includes(v)) return v as T
  throw typeof v === "string" ? new Invalid(where, `unknown ${what} "${v}" (one of ${choices.join(", ")})`) : mismatch(where, "string", v)
}

export const shapeProblem = (shape: unknown): string | undefined => {
  if (!Array.isArray(shape)) return `shape is ${describe(shape)}`
  if (shape.length > MAX_NDIM) return `${shape.length} dims (at most ${MAX_NDIM})`
  return shape.every(isNatural) ? undefined : `bad shape [${shape.join(",")}]`
}

export const errorPayload = (v: unknown, where: string): ErrorPayload => {
  if (!(v instanceof ErrorPayload)) throw mismatch(where, "ErrorPayload", v)
  if (typeof v.type !== "string" || typeof v.message !== "string" || !Array.isArray(v.frames) || (v.reason !== undefined && typeof v.reason !== "string"))
    throw new Invalid(where, "ErrorPayload: type, message and reason (if any) must be strings, frames an array")
  v.frames.forEach((f: Frame, i) => {
    if (typeof f !== "object" || f === null || typeof f.file !== "string" || !isNatural(f.line) || typeof f.function !== "string") throw new Invalid(`${where}.frames[${i}]`, "expected {file: string, line: unsigned integer, function: string}")
  })
  return v
}

/** Why a value that is not an object (a bigint past 64 bits, undefined, a function) cannot go on the wire, or undefined. */
export const scalarProblem = (v: unknown): string | undefined => {
  switch (typeof v) {
    case "number":
    case "string":
    case "boolean":
      return undefined
    case "bigint":
      return v >= INT64_MIN && v <= UINT64_MAX ? undefined : `bigint ${v} does not fit in 64 bits`
    default:
      return `expected a value, got ${typeof v}`
  }
}

/**
 * The integral floats the wire tells from integers: within 32 bits. This encoder writes an
 * integer outside [-2^31, 2^32) as float64 (the library's rule for JS numbers), so an
 * integral float64 out there decodes as a number, an integer.
 */
export const isWireFloat = (v: number): boolean => typeof v === "number" && (!Number.isInteger(v) || (v >= -(2 ** 31) && v < 2 ** 32))

export const floatProblem = (v: unknown): string =>
  typeof v !== "number" ? `float(value): expected a number, got ${typeof v}` : `float(${v}): an integral float past 32 bits cannot be told from an integer on the wire`

/** Why a HostTensor cannot go on the wire (dtype, shape, byte count), or undefined. */
export const hostTensorProblem = (t: HostTensor): string | undefined => {
  if (!DTYPES.includes(t.dtype)) return `HostTensor: unknown dtype ${String(t.dtype)}`
  const problem = shapeProblem(t.shape)
  if (problem !== undefined) return `HostTensor: ${problem}`
  if (!(t.data instanceof Uint8Array)) return `HostTensor: data is ${describe(t.data)}, not a Uint8Array`
  const expected = byteSize(t.dtype, t.shape)
  if (expected !== t.data.byteLength) return `HostTensor: ${t.data.byteLength} bytes for ${shapeText(t.dtype, t.shape)}`
  if (expected > U32_MAX - (3 + 8 * MAX_NDIM + 7)) return `HostTensor: ${expected} bytes is more than one ext can carry`
  return undefined
}

/** Why a SharedTensor cannot go on the wire (dtype, shape, its place), or undefined. */
export const sharedTensorProblem = (t: SharedTensor): string | undefined => {
  if (!DTYPES.includes(t.dtype)) return `SharedTensor: unknown dtype ${String(t.dtype)}`
  const problem = shapeProblem(t.shape)
  if (problem !== undefined) return `SharedTensor: ${problem}`
  if (!isNatural(t.segment) || !isNatural(t.offset)) return `SharedTensor: segment ${t.segment} and offset ${t.offset} must be non-negative safe integers`
  return undefined
}

// ---- Value trees ------------------------------------------------------------------------------

/**
 * A value tree's failure, returned (not thrown) so the success path costs one comparison per
 * node; the path is collected on the way out, innermost first.
 */
class ValueFailure {
  readonly path: Array<string | number> = []
  constructor(readonly problem: string) {}

  at(where: string): Invalid {
    let path = where
    for (let i = this.path.length - 1; i >= 0; i--) {
      const k = this.path[i]!
      path += typeof k === "number" ? `[${k}]` : /^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`
    }
    return new Invalid(path, this.problem)
  }
}

/** How a Value tree is checked: as decoded from an owned frame, from a borrowed one, or to be encoded. */
export const Check = { Owned: 0, Borrowed: 1, Encode: 2 } as const
export type Check = (typeof Check)[keyof typeof Check]
const BORROWED: Check = Check.Borrowed, ENCODE: Check = Check.Encode

/**
 * Stands for a map key that was not UTF-8 (the decoder's mapKeyConverter gives it for the
 * NOT_UTF8 marker): random, so no real key is mistaken for it.
 */
export const BAD_KEY = `\u0000 not UTF-8 ${crypto.randomUUID()}`

const LONE_SURROGATE = "string with a lone surrogate (not encodable as UTF-8)"

/** A string to be encoded: UTF-8 cannot carry a lone surrogate. */
export const wellFormed = (v: string, where: string): string => {
  if (v.isWellFormed()) return v
  throw new Invalid(where, LONE_SURROGATE)
}

/**
 * `v` as a Value (bin copied out of a borrowed frame), or a ValueFailure. `depth`: v's own
 * depth.
 */
const checkValue = (v: unknown, depth: number, check: Check): unknown => {
  switch (typeof v) {
    case "string":
      return check === ENCODE && !v.isWellFormed() ? new ValueFailure(LONE_SURROGATE) : v
    case "number":
    case "boolean":
      return v
    case "bigint": {
      const problem = scalarProblem(v)
      return problem === undefined ? v : new ValueFailure(problem)
    }
    case "object": {
      if (v === null) return v
      if (Array.isArray(v)) {
        if (depth > MAX_DEPTH) return new ValueFailure(`nesting deeper than ${MAX_DEPTH}`)
        for (let i = 0; i < v.length; i++) {
          const x: unknown = v[i], y = checkValue(x, depth + 1, check)
          if (y !== x) {
            if (y instanceof ValueFailure) { y.path.push(i); return y }
            v[i] = y
          }
        }
        return v
      }
      if (v instanceof Ref) return isNatural(v.id) ? v : new ValueFailure(`Ref id ${v.id} is not a non-negative safe integer`)
      if (v instanceof HostTensor) {
        const problem = hostTensorProblem(v)
        return problem === undefined ? v : new ValueFailure(problem)
      }
      if (v instanceof SharedTensor) {
        const problem = sharedTensorProblem(v)
        return problem === undefined ? v : new ValueFailure(problem)
      }
      if (v instanceof Uint8Array) return check === BORROWED ? copyOf(v) : v
      if (v instanceof FloatNumber) return check !== ENCODE || isWireFloat(v.value) ? v : new ValueFailure(floatProblem(v.value))
      if (v instanceof BadExt) return new ValueFailure(v.problem)
      const proto: unknown = Object.getPrototypeOf(v)
      if (proto === Object.prototype || proto === null) {
        if (depth > MAX_DEPTH) return new ValueFailure(`nesting deeper than ${MAX_DEPTH}`)
        const map = v as Record<string, unknown>
        for (const key in map) {
          if (key === "__proto__") return new ValueFailure("map key __proto__ is not allowed")
          if (key === BAD_KEY) return new ValueFailure(`map key ${NOT_UTF8.problem}`)
          if (check === ENCODE && !key.isWellFormed()) return new ValueFailure(`map key: ${LONE_SURROGATE}`)
          const x = map[key], y = checkValue(x, depth + 1, check)
          if (y !== x) {
            if (y instanceof ValueFailure) { y.path.push(key); return y }
            map[key] = y
          }
        }
        return v
      }
      return new ValueFailure(`expected a value, got ${describe(v)}`)
    }
    default:
      return new ValueFailure(scalarProblem(v)!)
  }
}

/** Checks a Value tree; from a borrowed frame, bin in it is replaced by copies. */
export const value = <V>(v: unknown, where: string, depth: number, check: Check): V => {
  const checked = checkValue(v, depth, check)
  if (checked instanceof ValueFailure) throw checked.at(where)
  return checked as V
}

export const isMap = (v: unknown): boolean =>
  typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Ref) && !(v instanceof HostTensor) && !(v instanceof SharedTensor) && !(v instanceof Uint8Array) && !(v instanceof BadExt) && !(v instanceof FloatNumber)
