/**
 * Resolves the function a command names: `ops.<name>` from the built-ins, or
 * `<module>:<export>` from a user module imported on first use. Modules load only from the
 * allowed roots (MONARCH_FUNCTION_PATH), never from node_modules or a dot folder (as a root or
 * on the way to a module), and only once Bun's transpiler has found the export in the file's
 * text: a module without it is refused before its top level runs.
 */
import { Effect } from "effect"
import { existsSync, readFileSync, realpathSync, statSync } from "node:fs"
import { isAbsolute, relative, resolve, sep } from "node:path"
import { builtinFunction } from "./kernels/dispatch.ts"
import type { RemoteFunction } from "./function.ts"
import { FunctionNotFound } from "./errors.ts"

/** Extensions tried after the name itself, and the transpiler loader that reads each. */
const LOADERS: ReadonlyArray<readonly [string, "ts" | "js"]> = [[".ts", "ts"], [".js", "js"], [".mts", "ts"], [".mjs", "js"]]
const EXTENSIONS = ["", ...LOADERS.map(([ext]) => ext)]

/** A path component a search never enters: installed packages and hidden folders (.git, .cache, ...). */
const hidden = (component: string): boolean => component === "node_modules" || (component.startsWith(".") && component !== "." && component !== "..")

/** Whether any component of `path` is hidden. */
const passesHidden = (path: string): boolean => path.split(sep).some(hidden)

const loaderOf = (path: string): "ts" | "js" => LOADERS.find(([ext]) => path.endsWith(ext))?.[1] ?? "ts"

/** The export names a module declares, read from its text without running it. */
const declaredExports = (path: string): ReadonlyArray<string> =>
  new Bun.Transpiler({ loader: loaderOf(path) }).scan(readFileSync(path, "utf8")).exports

/** Whether a function name is a built-in op (`ops.<name>`) rather than `module:export`. */
export const isBuiltin = (name: string): boolean => name.startsWith("ops.")

export class FunctionTable {
  private readonly resolved = new Map<string, RemoteFunction>()
  private readonly roots: ReadonlyArray<string>
  /** Roots given but not used: inside node_modules or a dot folder. */
  private readonly refusedRoots: ReadonlyArray<string>

  constructor(roots: ReadonlyArray<string>) {
    const real = roots.filter((r) => existsSync(r)).map((r) => realpathSync(r))
    this.roots = real.filter((r) => !passesHidden(r))
    this.refusedRoots = real.filter((r) => passesHidden(r))
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
      const exports = yield* Effect.try({
        try: () => declaredExports(path),
        catch: (e) => new FunctionNotFound({ message: `reading the exports of ${path} failed: ${e instanceof Error ? e.message : String(e)}` }),
      })
      // NOTE: before the import, so that naming any file under a root cannot run its top level.
      if (!exports.includes(exportName))
        return yield* new FunctionNotFound({ message: `${path} does not export "${exportName}" (exports: ${exports.join(", ") || "none"}; an export must be declared in the module itself, not through export * or CommonJS); it was not imported` })
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

  /** The module file under one of the roots, refusing absolute paths, escapes and hidden folders. */
  private locate(moduleName: string): Effect.Effect<string, FunctionNotFound> {
    return Effect.suspend(() => {
      if (isAbsolute(moduleName))
        return Effect.fail(new FunctionNotFound({ message: `module "${moduleName}": absolute paths are not allowed; name it relative to MONARCH_FUNCTION_PATH` }))
      let skippedHidden = false
      for (const root of this.roots) {
        for (const ext of EXTENSIONS) {
          const candidate = resolve(root, moduleName + ext)
          if (!existsSync(candidate) || !statSync(candidate).isFile()) continue
          const real = realpathSync(candidate)
          if (!real.startsWith(root + sep)) continue
          if (passesHidden(relative(root, candidate)) || passesHidden(relative(root, real))) {
            skippedHidden = true
            continue
          }
          return Effect.succeed(real)
        }
      }
      const notes = [
        skippedHidden ? "node_modules and dot folders are never searched" : "",
        this.refusedRoots.length > 0 ? `roots not used, being in node_modules or a dot folder: [${this.refusedRoots.join(", ")}]` : "",
      ].filter((n) => n !== "")
      return Effect.fail(new FunctionNotFound({
        message: `module "${moduleName}" not found under the allowed roots [${this.roots.join(", ")}] (MONARCH_FUNCTION_PATH)${notes.length > 0 ? `; ${notes.join("; ")}` : ""}`,
      }))
    })
  }
}
