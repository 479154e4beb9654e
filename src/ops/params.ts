/**
 * An op's parameters, declared in torch's order, and the binder that matches a call's
 * positional and keyword arguments to them: each argument by position or by name (keyword-only
 * ones by name), a default where one is declared, and a refusal (OpArgumentError) for a
 * missing argument, one given twice, an unknown keyword or a value of the wrong kind. The same
 * binder runs on the controller (over TensorMetas, before sending) and on the worker (over
 * Tensors, for clients that talk to workers directly).
 */
import { DTYPES, FloatNumber, type DType } from "../protocol/values.ts"
import { bad, describe, type TensorMeta } from "./meta.ts"
import type { Scalar } from "./promotion.ts"

/** What a parameter accepts, and the value the bound argument then has (T: the tensor type). */
export interface KindValue<T> {
  readonly tensor: T
  /** A list of tensors (cat, stack). */
  readonly tensors: T[]
  readonly scalar: number
  /** A tensor or a number operand (a boolean or a FloatNumber kept as it is: its kind decides promotion). */
  readonly tensorOrScalar: T | Scalar
  readonly int: number
  readonly bool: boolean
  readonly dtype: DType
  /** A size, or a list of sizes (non-negative); bound as a list. */
  readonly shape: number[]
  /** An integer, or a list of sizes (randint's `high`, which is its size in the randint(high, size) form). */
  readonly intOrShape: number | number[]
  /** A list of integers (a reshape's sizes, -1 included). */
  readonly ints: number[]
  /** A dim, or a list of dims, not yet normalised (that needs the tensor's rank). */
  readonly dims: number | number[]
  readonly string: string
}
export type Kind = keyof KindValue<unknown>

export interface Param<N extends string = string, K extends Kind = Kind, D = unknown, R extends boolean = boolean, W extends boolean = boolean> {
  readonly name: N
  readonly kind: K
  /** Absent: the argument is required. null: torch's None. */
  readonly default?: D
  readonly required: R
  /** After torch's `*`: only by name. */
  readonly kwOnly: W
}

/** The value a bound parameter has: its kind's, or null when None is its default. */
export type ValueOf<P, T> = P extends Param<string, infer K, infer D, boolean, boolean> ? KindValue<T>[K] | (null extends D ? null : never) : never

/** A call's arguments bound by name (T: TensorMeta on the controller, Tensor on the worker). */
export type Bound<P extends ReadonlyArray<Param>, T = TensorMeta> = { readonly [E in P[number] as E["name"]]: ValueOf<E, T> }

/** A required parameter. */
export const arg = <N extends string, K extends Kind>(name: N, kind: K): Param<N, K, never, true, false> =>
  ({ name, kind, required: true, kwOnly: false })

/** An optional parameter with its default (null: None). */
export const opt = <N extends string, K extends Kind, const D extends KindValue<TensorMeta>[K] | null>(name: N, kind: K, default_: D): Param<N, K, D, false, false> =>
  ({ name, kind, default: default_, required: false, kwOnly: false })

/** A keyword-only parameter (after torch's `*`) with its default. */
export const kw = <N extends string, K extends Kind, const D extends KindValue<TensorMeta>[K] | null>(name: N, kind: K, default_: D): Param<N, K, D, false, true> =>
  ({ name, kind, default: default_, required: false, kwOnly: true })

/** A call's keyword arguments: any parameter by name (an optional one may be null, for None). */
export type Kwargs<P extends ReadonlyArray<Param>, T> = { readonly [E in P[number] as E["name"]]?: ValueOf<E, T> | (E["required"] extends true ? never : null) }

/**
 * The ways to call an op with parameters P, as tuples: the required positionals, then any
 * number of the optional ones in order, then optionally an object of keyword arguments (what
 * the typed surface, src/controller/ops.ts, accepts; T is its tensor type).
 */
export type CallForms<P extends ReadonlyArray<Param>, T, All extends ReadonlyArray<Param> = P, Acc extends ReadonlyArray<unknown> = readonly []> =
  P extends readonly [infer H extends Param, ...infer R extends ReadonlyArray<Param>]
    ? H["kwOnly"] extends true ? readonly [...Acc, Kwargs<All, T>?]
    : H["required"] extends true ? CallForms<R, T, All, readonly [...Acc, ValueOf<H, T>]>
    : readonly [...Acc, Kwargs<All, T>?] | CallForms<R, T, All, readonly [...Acc, ValueOf<H, T>]>
    : readonly [...Acc, Kwargs<All, T>?]

const WRONG = Symbol("wrong kind")
const isInt = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v)

const EXPECTS: Readonly<Record<Kind, string>> = {
  tensor: "a tensor", tensors: "a list of tensors", string: "a string", scalar: "a number", tensorOrScalar: "a tensor or a number", int: "an integer", bool: "a boolean",
  dtype: `a dtype (${DTYPES.join(", ")})`, shape: "a size or a list of sizes", intOrShape: "an integer or a list of sizes", ints: "a list of integers", dims: "a dim or a list of dims",
}

/** The bound value of v for a kind, or WRONG. */
const coerce = (kind: Kind, v: unknown, isTensor: (v: unknown) => boolean): unknown => {
  switch (kind) {
    case "tensor": return isTensor(v) ? v : WRONG
    case "tensors": return Array.isArray(v) && v.every(isTensor) ? v : WRONG
    case "string": return typeof v === "string" ? v : WRONG
    case "scalar": return typeof v === "number" ? v : v instanceof FloatNumber ? v.value : typeof v === "boolean" ? Number(v) : WRONG
    case "tensorOrScalar": return isTensor(v) || typeof v === "number" || typeof v === "boolean" || v instanceof FloatNumber ? v : WRONG
    case "int": return isInt(v) ? v : WRONG
    case "bool": return typeof v === "boolean" ? v : WRONG
    case "dtype": return (DTYPES as ReadonlyArray<unknown>).includes(v) ? v : WRONG
    case "shape":
      if (isInt(v)) return v >= 0 ? [v] : WRONG
      return Array.isArray(v) && v.every((d) => isInt(d) && d >= 0) ? v : WRONG
    case "intOrShape": return isInt(v) || (Array.isArray(v) && v.every((d) => isInt(d) && d >= 0)) ? v : WRONG
    case "ints": return Array.isArray(v) && v.every(isInt) ? v : WRONG
    case "dims": return isInt(v) || (Array.isArray(v) && v.every(isInt)) ? v : WRONG
  }
}

export type Binder<P extends ReadonlyArray<Param>> = <T>(args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, isTensor: (v: unknown) => v is T) => Bound<P, T>

/** The binder of `ops.<op>(params)`, made once per op (the worker runs it per command). */
export const binder = <const P extends ReadonlyArray<Param>>(op: string, params: P): Binder<P> => {
  const positional = params.filter((p) => !p.kwOnly).length
  if (params.slice(positional).some((p) => !p.kwOnly)) throw new Error(`ops.${op}: keyword-only parameters must come last`)
  const names = new Set(params.map((p) => p.name))
  return <T>(args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>>, isTensor: (v: unknown) => v is T): Bound<P, T> => {
    if (args.length > positional) bad(op, `takes ${positional} positional argument${positional === 1 ? "" : "s"} (${signatureOf(op, params)}), got ${args.length}`)
    for (const k in kwargs) if (!names.has(k)) bad(op, `unexpected keyword argument '${k}' (${signatureOf(op, params)})`)
    const out: Record<string, unknown> = {}
    for (let i = 0; i < params.length; i++) {
      const p = params[i]!
      const byName = Object.hasOwn(kwargs, p.name) ? kwargs[p.name] : undefined
      let v = i < args.length ? args[i] : undefined
      if (v !== undefined && byName !== undefined) bad(op, `got two values for '${p.name}'`)
      v ??= byName
      // null (the wire's None) asks for the default of an optional parameter.
      if (v === undefined || (v === null && !p.required)) {
        if (p.required) bad(op, `missing argument '${p.name}' (${signatureOf(op, params)})`)
        out[p.name] = p.default
        continue
      }
      const value = coerce(p.kind, v, isTensor)
      if (value === WRONG) bad(op, `${p.name} must be ${EXPECTS[p.kind]}, got ${describe(v)}`)
      out[p.name] = value
    }
    return out as Bound<P, T>
  }
}

/** `add(input, other, *, alpha=1)`: an op's signature as torch writes it. */
export const signatureOf = (op: string, params: ReadonlyArray<Param>): string => {
  const parts: string[] = []
  let star = false
  for (const p of params) {
    if (p.kwOnly && !star) (star = true), parts.push("*")
    parts.push(p.required ? p.name : `${p.name}=${p.default === null ? "None" : typeof p.default === "boolean" ? (p.default ? "True" : "False") : JSON.stringify(p.default)}`)
  }
  return `${op}(${parts.join(", ")})`
}
