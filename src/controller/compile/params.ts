/**
 * Replay parameters: the numbers a program names with param() (a learning rate, a step count)
 * are not part of a compiled step's signature but sent with each call. To find where each goes
 * in the commands, the step is traced once more with each at another value of its kind
 * (probeValue): an integer stays one and a fraction one (ops promote an integer tensor with a
 * float, not with an integer), near the first.
 */
import { FloatNumber, HostTensor } from "../../protocol/values.ts"
import { ControllerError } from "../errors.ts"
import { RemoteTensor } from "../tensor.ts"

/** A number a compiled step takes as a replay parameter: see param(). */
export class Param {
  constructor(readonly value: number) {}

  toString(): string {
    return `param(${this.value})`
  }
}

/**
 * Names a number of a compiled step's call as a replay parameter (a learning rate, a step
 * count): the step gets the number, and a call with another value replays the recording with
 * it. Every other number is part of the signature (a new value traces again).
 */
export const param = (value: number): Param => {
  if ((value as unknown) instanceof FloatNumber) throw new ControllerError({ reason: "argument", message: `param(${value}): a replay parameter is an integer or a fraction; pass ${value} as a plain argument (part of the signature)` })
  if (typeof value !== "number") throw new ControllerError({ reason: "argument", message: `param(value): a replay parameter is a number, not ${typeof value}` })
  return new Param(value)
}

/** A step's arguments as a compiled call takes them: any number (in arrays and plain objects too) may be a param(). */
export type WithParams<T> = T extends number ? T | Param
  : T extends RemoteTensor | HostTensor | Uint8Array | ((...args: never[]) => unknown) ? T
  : T extends ReadonlyArray<unknown> | Record<string, unknown> ? { [K in keyof T]: WithParams<T[K]> }
  : T

/** A number as the signature and messages write it: every value its own (-0 too). */
export const numberText = (v: number): string => (Object.is(v, -0) ? "-0" : String(v))

/**
 * Another value for the i-th replay parameter, of the same kind (an integer, or a fraction:
 * ops promote an integer tensor with a float, which a fraction is, not with an integer, so the kind is part of
 * the signature), near it (the same sign, a probability stays one), or the value itself where
 * it has no other of its kind (a value that is not finite, or past the integers' precision).
 */
export const probeValue = (v: number, i: number): number => {
  if (Number.isInteger(v)) return Math.abs(v) < 2 ** 52 ? v + 1 + i : v
  if (!Number.isFinite(v) || Math.abs(v) < 2 ** -1000) return v
  for (let k = i; ; k++) {
    const p = v * (0.75 - k / 1024)
    if (!Number.isInteger(p) && p !== v) return p
  }
}

/** What the signature holds of a replay parameter: its kind, or its value where it has no other of its kind. */
export const paramKind = (v: number): string => (Object.is(probeValue(v, 0), v) ? numberText(v) : Number.isInteger(v) ? "an integer" : "a fraction")
