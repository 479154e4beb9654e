/**
 * Checking a first trace before it becomes a recording, by tracing again (nothing is sent):
 * with the same arguments, a step whose commands depend on what earlier calls left behind is
 * refused; with the replay parameters at other values, where each goes is found, and one that
 * changes the commands or goes in through arithmetic is refused, naming it. And verify's
 * comparison of a second call's trace with the recording.
 */
import { Effect } from "effect"
import type { Core } from "../core.ts"
import { ControllerError } from "../errors.ts"
import { CallSite } from "../sites.ts"
import type { Positions, Recording } from "./build.ts"
import { type Path, compareTraces, describeCommand } from "./diff.ts"
import { numberText, probeValue } from "./params.ts"
import { type Flat, flatten } from "./signature.ts"
import { Held, Recorder, type Recorded, madeInside, messageOf, recordStep } from "./recorder.ts"

/** A trace of the step, or its failure as a ControllerError (a throw in the step included). */
type Attempt<R> = { readonly _tag: "Success"; readonly success: Recorded<R> } | { readonly _tag: "Failure"; readonly failure: unknown }

/**
 * Why the step cannot be replayed, from a trace with the same arguments (`again`), or
 * undefined: a replay repeats the first trace, so a step whose commands depend on what its
 * earlier calls left behind is not one recording. One that uses a tensor its first trace made
 * (state made on a first call, an optimizer's moments) needs warmup; one that issues other
 * commands (a count it keeps) needs that to be an argument.
 */
const repeatProblem = <R>(name: string, again: Attempt<R>, flat: Flat, first: Recorder): string | undefined => {
  if (again._tag === "Failure") {
    // Another failure (a step that releases a tensor it was given, say) leaves nothing to compare.
    const why = messageOf(again.failure)
    return why.includes(madeInside(name))
      ? `traced again, its step uses a tensor its first trace made (${why}): state made on its first call, such as an optimizer's moments, would be made afresh by every replay; compile it with { warmup: 1 } so that call runs op by op before the step is traced`
      : undefined
  }
  const d = compareTraces(first, flat.tensors, again.success.trace, flat.tensors)
  const n = d.numbers[0]
  const differs = d.structural ?? (n && `command ${n.command}: ${describeCommand(first.commands[n.command]!)}: ${n.path.join(".")}: ${n.a}, then ${n.b}`)
  return differs === undefined ? undefined
    : `traced twice with the same arguments, its step issued other commands (${differs}): they depend on something its arguments do not hold (a count it keeps, say); pass that as an argument`
}

/**
 * Where each replay parameter goes, from a trace with the parameters at `values` (nothing is
 * sent): each found where it was in the first trace, with its new value, and nothing else
 * changed. Or why not: the step fails, its commands or tensors change, or a number changes
 * that is none of the parameters (one reached a command through arithmetic).
 */
const positionsIn = <R>(again: Attempt<R>, flat: Flat, values: ReadonlyArray<number>, first: Recorder): { at: Positions[] } | { why: string } => {
  if (again._tag === "Failure") return { why: `the step fails (${messageOf(again.failure)})` }
  const d = compareTraces(first, flat.tensors, again.success.trace, flat.tensors)
  if (d.structural !== undefined) return { why: `it changes the commands or the tensors (${d.structural})` }
  const at: Array<Array<{ command: number; path: Path }>> = flat.params.map(() => [])
  for (const n of d.numbers) {
    const i = flat.params.findIndex((v, j) => Object.is(n.a, v) && Object.is(n.b, values[j]))
    if (i < 0) return { why: `it reaches ${describeCommand(first.commands[n.command]!)} through arithmetic (${numberText(n.a)} there, then ${numberText(n.b)}), which a replay cannot redo: compute that number outside the step and pass it` }
    at[i]!.push({ command: n.command, path: n.path })
  }
  return { at }
}

/**
 * Checks the first trace with one more (nothing is sent): with the same arguments when the
 * call names no replay parameter, else with every parameter at another value, which also
 * finds where each goes. A difference is then traced down: the same arguments again (state
 * the arguments do not hold), then one parameter at a time, to name the one at fault.
 */
export const checkTrace = <A extends ReadonlyArray<unknown>, R, E, Rq>(core: Core, held: Held, name: string, step: (...args: A) => unknown, args: ReadonlyArray<unknown>, flat: Flat, first: Recorder, called: CallSite | undefined) =>
  Effect.gen(function* () {
    const attempt = (values: ReadonlyArray<number>) => Effect.result(recordStep<A, R, E, Rq>(core, held, name, step, args, values, called).pipe(
      Effect.catchDefect((d) => Effect.fail(new ControllerError({ reason: "thrown", message: messageOf(d) }))),
    )) as Effect.Effect<Attempt<R>, never, Rq>
    const refuse = (why: string) => new ControllerError({ reason: "not-replayable", message: `compile(${name}): ${why}` })
    const probes = flat.params.map(probeValue)
    const again = yield* attempt(probes)
    if (flat.params.length === 0) {
      const problem = repeatProblem(name, again, flat, first)
      return problem === undefined ? [] : yield* refuse(problem)
    }
    const found = positionsIn(again, flat, probes, first)
    if ("at" in found) return found.at
    const problem = repeatProblem(name, yield* attempt(flat.params), flat, first)
    if (problem !== undefined) return yield* refuse(problem)
    let culprit = 0, why = found.why
    for (let i = 0; i < flat.params.length && flat.params.length > 1; i++) {
      const one = flat.params.map((v, j) => (j === i ? probes[i]! : v))
      const alone = positionsIn(yield* attempt(one), flat, one, first)
      if ("why" in alone) {
        culprit = i, why = alone.why
        break
      }
    }
    const path = flatten(args, true).paramPaths[culprit]
    return yield* refuse(`${path} is a replay parameter (param(${numberText(flat.params[culprit]!)})), but with another value (${numberText(probes[culprit]!)}) ${why}; pass it as a plain number instead (part of the signature: each new value traces again)`)
  })

/** A verify trace against the recording: the difference, naming both call sites, or undefined. */
export const verifyAgainst = (recording: Recording<unknown>, again: Recorder, flat: Flat): string | undefined => {
  const d = compareTraces(recording.trace, recording.args, again, flat.tensors)
  if (d.structural !== undefined) return d.structural
  const allowed = new Set(recording.paramAt.flatMap((ps) => ps.map((p) => `${p.command}:${p.path.join(".")}`)))
  const bad = d.numbers.find((n) => !allowed.has(`${n.command}:${n.path.join(".")}`))
  return bad === undefined ? undefined : `command ${bad.command}: ${describeCommand(recording.trace.commands[bad.command]!)}, then ${describeCommand(again.commands[bad.command]!)}: ${bad.path.join(".")}: ${bad.a}, then ${bad.b}`
}
