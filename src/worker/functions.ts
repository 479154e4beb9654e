/**
 * Resolves the function a command names: `ops.<name>` from the built-ins, or
 * `<module>:<export>` from a user module imported on first use. Modules load only from the
 * allowed roots (MONARCH_FUNCTION_PATH); a name that escapes them does not resolve.
 */
import { Effect } from "effect"
import { existsSync, realpathSync, statSync } from "node:fs"
import { isAbsolute, resolve, sep } from "node:path"
import { builtinFunction } from "../ops/kernels.ts"
import type { RemoteFunction } from "../ops/function.ts"
import { FunctionNotFound } from "./errors.ts"

const EXTENSIONS = ["", ".ts", ".js", ".mts", ".mjs"]

/** Whether a function name is a built-in op (`ops.<name>`) rather than `module:export`. */
export const isBuiltin = (name: string): boolean => name.startsWith("ops.")

export class FunctionTable {
  private readonly resolved = new Map<string, RemoteFunction>()
  private readonly roots: ReadonlyArray<string>

  constructor(roots: ReadonlyArray<string>) {
    this.roots = roots.filter((r) => existsSync(r)).map((r) => realpathSync(r))
  }

  /** The function if it was resolved before (the fast path). */
  cached(name: string): RemoteFunction | undefined {
    return this.resolved.get(name)
  }

  resolve(name: string): Effect.Effect<RemoteFunction, FunctionNotFound> {
    const cached = this.resolved.get(name)
    if (cached) return Effect.succeed(cached)
    if (isBuiltin(name)) {
      const fn = builtinFunction(name.slice(4))
      if (!fn) return Effect.fail(new FunctionNotFound({ message: `no built-in ${name}` }))
      this.resolved.set(name, fn)
      return Effect.succeed(fn)
    }
    const colon = name.lastIndexOf(":")
    if (colon <= 0 || colon === name.length - 1)
      return Effect.fail(new FunctionNotFound({ message: `"${name}" is neither ops.<name> nor <module>:<export>` }))
    const moduleName = name.slice(0, colon), exportName = name.slice(colon + 1)
    const locate = this.locate(moduleName), resolved = this.resolved
    return Effect.gen(function* () {
      const path = yield* locate
      const module = yield* Effect.tryPromise({
        try: () => import(path) as Promise<Record<string, unknown>>,
        catch: (e) => new FunctionNotFound({ message: `importing ${path} failed: ${e instanceof Error ? e.message : String(e)}` }),
      })
      const fn = module[exportName]
      if (typeof fn !== "function")
        return yield* new FunctionNotFound({ message: `${path} has no function export "${exportName}"` })
      resolved.set(name, fn as RemoteFunction)
      return fn as RemoteFunction
    })
  }

  /** The module file under one of the roots, refusing absolute paths and escapes. */
  private locate(moduleName: string): Effect.Effect<string, FunctionNotFound> {
    return Effect.suspend(() => {
      if (isAbsolute(moduleName))
        return Effect.fail(new FunctionNotFound({ message: `module "${moduleName}": absolute paths are not allowed; name it relative to MONARCH_FUNCTION_PATH` }))
      for (const root of this.roots) {
        for (const ext of EXTENSIONS) {
          const candidate = resolve(root, moduleName + ext)
          if (!existsSync(candidate) || !statSync(candidate).isFile()) continue
          const real = realpathSync(candidate)
          if (real.startsWith(root + sep)) return Effect.succeed(real)
        }
      }
      return Effect.fail(new FunctionNotFound({
        message: `module "${moduleName}" not found under the allowed roots [${this.roots.join(", ")}] (MONARCH_FUNCTION_PATH)`,
      }))
    })
  }
}
