/**
 * The kinds of field a message is made of (messages.ts declares each message as a list of
 * named fields of these kinds). Each kind has its wire type as docs/protocol.md writes it,
 * its check on the way in (which also converts: bigints to numbers, bytes copied out of a
 * borrowed frame) and its check on the way out (what the wire cannot carry), both throwing
 * an Invalid that names the field.
 */
import type { DecodeContext, EncodeContext } from "./context.ts"
import { DEVICES } from "./ext.ts"
import { NDSlice } from "./ndslice.ts"
import {
  array, bool, Check, copyOf, errorPayload, Invalid, isMap, MAX_NDIM, mismatch, oneOf, ref, refs, shapeProblem, str, strs, uint, uints, value, wellFormed,
} from "./validate.ts"
import { DTYPES, TensorFactory } from "./values.ts"

export interface Field<T> {
  /** The wire type, as the doc's message tables write it. */
  readonly wire: string
  /** It may be left off the end of the message array (optional()); absent, it decodes as undefined. */
  readonly optional?: true
  /** `v` as decoded by the library, checked; `depth`: its own depth in the message. */
  readonly decode: (v: unknown, where: string, depth: number, ctx: DecodeContext) => T
  /** `v` checked for the wire, in its wire form. */
  readonly encode: (v: T, where: string, depth: number, ctx: EncodeContext) => unknown
}

/**
 * A field a message may end without (messages.ts allows these only after its other fields): a
 * sender that has nothing for it leaves it off, so frames from before it was added stay valid.
 */
export const optional = <T>(f: Field<T>): Field<T> & { readonly optional: true } => ({ ...f, optional: true })

/** A kind checked the same way in and out, its value its own wire form. */
const either = <T>(wire: string, check: (v: unknown, where: string, depth: number) => T): Field<T> => ({ wire, decode: check, encode: check })

export const uintField = either("uint", uint)

/**
 * The largest ident a command may carry: a worker answers `Status(ident + 1)`, which must still
 * be a uint; a worker refuses (ProtocolError) any ident it could not answer.
 */
export const MAX_IDENT = Number.MAX_SAFE_INTEGER - 1

/** A command's ident: a uint up to MAX_IDENT. */
export const identField = either("ident", (v, where): number => {
  const n = uint(v, where)
  if (n > MAX_IDENT) throw new Invalid(where, `ident ${n} is over ${MAX_IDENT}: the Status after it (ident + 1) could not be sent`)
  return n
})
export const boolField = either("bool", bool)
export const refField = either("Ref", ref)
export const refList = either("[Ref]", refs)
export const uintList = either("[uint]", uints)
export const errorField = either("ErrorPayload", errorPayload)

/** Exactly `length` bytes (a handshake's nonce or proof); copied out of a borrowed frame. */
export const bytesField = (length: number): Field<Uint8Array> => {
  const check = (v: unknown, where: string): Uint8Array => {
    if (!(v instanceof Uint8Array)) throw mismatch(where, "bin", v)
    if (v.byteLength !== length) throw new Invalid(where, `${v.byteLength} bytes, expected ${length}`)
    return v
  }
  return { wire: `bin (${length} bytes)`, decode: (v, where, _depth, ctx) => (ctx.copyBytes ? copyOf(check(v, where)) : check(v, where)), encode: check }
}

export const strField: Field<string> = { wire: "str", decode: str, encode: (v, where) => wellFormed(str(v, where), where) }

export const strOrNil: Field<string | null> = {
  wire: "str or nil",
  decode: (v, where) => (v === null ? null : str(v, where)),
  encode: (v, where) => (v === null ? null : wellFormed(str(v, where), where)),
}

export const strList: Field<ReadonlyArray<string>> = {
  wire: "[str]",
  decode: strs,
  encode: (v, where, depth) => {
    const a = strs(v, where, depth)
    a.forEach((s, i) => wellFormed(s, `${where}[${i}]`))
    return a
  },
}

/** A str that must be one of `choices`. */
export const choice = <T extends string>(choices: ReadonlyArray<T>, what: string): Field<T> => either("str", oneOf(choices, what))

export const ndsliceField = either("NDSlice", (v, where): NDSlice => {
  if (!(v instanceof NDSlice)) throw mismatch(where, "NDSlice", v)
  if (v.ndim > MAX_NDIM) throw new Invalid(where, `NDSlice: ${v.ndim} dims (at most ${MAX_NDIM})`)
  return v
})

export const factoryField = either("TensorFactory", (v, where): TensorFactory => {
  if (!(v instanceof TensorFactory)) throw mismatch(where, "TensorFactory", v)
  if (!DTYPES.includes(v.dtype)) throw new Invalid(where, `TensorFactory: unknown dtype ${String(v.dtype)}`)
  if (!DEVICES.includes(v.device)) throw new Invalid(where, `TensorFactory: unknown device ${String(v.device)}`)
  const problem = shapeProblem(v.shape)
  if (problem !== undefined) throw new Invalid(where, `TensorFactory: ${problem}`)
  return v
})

/** A tensor's declared dtype and shape: `[dtype, [uint]]` on the wire. */
export interface DeclaredMeta {
  readonly dtype: (typeof DTYPES)[number]
  readonly shape: ReadonlyArray<number>
}

const declaredMeta = (v: unknown, where: string, depth: number): DeclaredMeta | null => {
  if (v === null) return null
  const a = array(v, where, depth)
  if (a.length !== 2) throw new Invalid(where, `expected [dtype, shape] or nil, got an array of ${a.length}`)
  const dtype = oneOf(DTYPES, "dtype")(a[0], `${where}[0]`)
  const shape = uints(a[1], `${where}[1]`, depth + 1)
  if (shape.length > MAX_NDIM) throw new Invalid(`${where}[1]`, `${shape.length} dims (at most ${MAX_NDIM})`)
  return { dtype, shape }
}

/** Per result, its declared dtype and shape, or nil where none is declared. */
export const metaList: Field<ReadonlyArray<DeclaredMeta | null>> = {
  wire: "[[str, [uint]] or nil]",
  decode: (v, where, depth) => array(v, where, depth).map((x, i) => declaredMeta(x, `${where}[${i}]`, depth + 1)),
  encode: (v, where, depth) => array(v, where, depth).map((x, i) => {
    const m = x === null ? null : declaredMeta([(x as DeclaredMeta).dtype, (x as DeclaredMeta).shape], `${where}[${i}]`, depth + 1)
    return m === null ? null : [m.dtype, m.shape]
  }),
}

/** How a decode checks Value trees: copying bin out of a borrowed frame. */
const decoding = (ctx: DecodeContext): Check => (ctx.copyBytes ? Check.Borrowed : Check.Owned)

/** A Value tree (messages.ts's Value). */
export const anyValue = <V>(): Field<V> => ({
  wire: "Value",
  decode: (v, where, depth, ctx) => value<V>(v, where, depth, decoding(ctx)),
  encode: (v, where, depth) => value<V>(v, where, depth, Check.Encode),
})

export const valueList = <V>(): Field<ReadonlyArray<V>> => ({
  wire: "[Value]",
  decode: (v, where, depth, ctx) => {
    if (!Array.isArray(v)) throw mismatch(where, "array", v)
    return value<ReadonlyArray<V>>(v, where, depth, decoding(ctx))
  },
  encode: (v, where, depth) => {
    if (!Array.isArray(v)) throw mismatch(where, "array", v)
    return value<ReadonlyArray<V>>(v, where, depth, Check.Encode)
  },
})

export const valueMap = <V>(): Field<{ readonly [key: string]: V }> => ({
  wire: "{str: Value}",
  decode: (v, where, depth, ctx) => {
    if (!isMap(v)) throw mismatch(where, "map", v)
    return value<{ readonly [key: string]: V }>(v, where, depth, decoding(ctx))
  },
  encode: (v, where, depth) => {
    if (!isMap(v)) throw mismatch(where, "map", v)
    return value<{ readonly [key: string]: V }>(v, where, depth, Check.Encode)
  },
})

/** A CommandGroup's commands: message arrays, each checked by the message codec a level down. */
export const commandList = <M>(): Field<ReadonlyArray<M>> => ({
  wire: "[message array]",
  decode: (v, where, depth, ctx) => {
    const wire = array(v, where, depth)
    const commands = new Array<M>(wire.length)
    let i = 0
    try {
      for (; i < wire.length; i++) commands[i] = ctx.command(wire[i], depth + 1, ctx) as M
    } catch (e) {
      throw inside(`${where}[${i}]`, e)
    }
    return commands
  },
  encode: (v, where, depth, ctx) => {
    const commands = array(v, where, depth)
    const wire = new Array<unknown>(commands.length)
    let i = 0
    try {
      for (; i < commands.length; i++) wire[i] = ctx.command(commands[i], depth + 1, ctx)
    } catch (e) {
      throw inside(`${where}[${i}]`, e)
    }
    return wire
  },
})

/** A failure inside the command at `where`, named from there. */
const inside = (where: string, e: unknown): unknown =>
  e instanceof Invalid ? new Invalid(e.where === "" ? where : `${where}.${e.where}`, e.problem) : e
