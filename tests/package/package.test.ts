// The package as a user gets it: `npm pack` here, `bun add` of the tarball in a fresh folder
// outside the repository, the native library built by `monarch-bun build`, and the
// user's own programs run there with the repository's Bun binary: one that trains on local
// workers (tests/package/app/train.ts), one written from the README with AdamW inside step
// scopes, compile and a checkpoint resume (app/resume.ts), one that attaches to workers started
// by the package's `monarch-bun launch ... -- worker` (app/attach.ts); and a program of every
// import the README's code shows (each module it names, each name it imports from one), which
// must typecheck and load. Nothing in that folder reaches back here.
import { afterAll, expect, test } from "bun:test"
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { freePort } from "../processes.ts"
import { readmeBlocks } from "../readme/blocks.ts"

const ROOT = new URL("../..", import.meta.url).pathname
const APP = new URL("./app/", import.meta.url).pathname
const dir = mkdtempSync(join(tmpdir(), "monarch-user-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

// The user's PATH: this Bun as `bun` (the package's bin runs under `#!/usr/bin/env bun`) and
// the system's tools, nothing of the repository's node_modules/.bin.
const bunDir = join(dir, ".bun-bin")
mkdirSync(bunDir)
symlinkSync(process.execPath, join(bunDir, "bun"))
const { MONARCH_SHIM_DIR: _, MONARCH_TOKEN: __, CONTROLLER_ADDR: ___, ...baseEnv } = process.env
// NVCC= builds only the cpu library on install (the cuda one takes minutes with nvcc).
const env = { ...baseEnv, PATH: `${bunDir}:/usr/local/bin:/usr/bin:/bin`, NVCC: "", MONARCH_LOG: "warn" }

const run = (cmd: string[], cwd: string, timeoutMs: number, extra: Record<string, string> = {}) => {
  const r = Bun.spawnSync(cmd, { cwd, env: { ...env, ...extra }, stdout: "pipe", stderr: "pipe", timeout: timeoutMs })
  const out = { status: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() }
  if (out.status !== 0) console.error(`${cmd.join(" ")} (in ${cwd}) exited ${out.status}:\n${out.stdout}\n${out.stderr}`)
  return out
}

/**
 * A program importing what README.md shows of the package: every name its code blocks import
 * from a `monarch-bun/...` module (merged per module), and every such module it names anywhere
 * (quoted or in backticks), as a namespace. It prints the modules it loaded.
 */
const readmeImports = (): string => {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8")
  const names = new Map<string, Set<string>>()
  for (const b of readmeBlocks(readme))
    for (const [, list, module] of b.code.matchAll(/import\s*\{([^}]*)\}\s*from\s*"(monarch-bun\/[^"]+)"/g)) {
      const set = names.get(module!) ?? new Set<string>()
      names.set(module!, set)
      for (const n of list!.split(",").map((x) => x.trim()).filter(Boolean)) set.add(n)
    }
  const modules = [...new Set([...readme.matchAll(/[`"](monarch-bun\/[a-z]+)[`"]/g)].map(([, m]) => m!))].sort()
  return [
    ...[...names].map(([m, ns]) => `import { ${[...ns].join(", ")} } from "${m}"`),
    ...modules.map((m, i) => `import * as m${i} from "${m}"`),
    `console.log(JSON.stringify([${modules.map((m, i) => `["${m}", Object.keys(m${i}).length]`).join(", ")}]))`,
    "",
  ].join("\n")
}

/** Every installed copy of a package, by its package.json's name, anywhere under node_modules. */
const copiesOf = (name: string, under: string): string[] => {
  const found: string[] = []
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (!e.isDirectory()) continue
      const p = join(d, e.name)
      const manifest = join(p, "package.json")
      if (existsSync(manifest) && dirname(p).endsWith("node_modules") && JSON.parse(readFileSync(manifest, "utf8")).name === name) found.push(p)
      walk(p)
    }
  }
  walk(under)
  return found
}

test("npm pack, bun add of the tarball in a fresh folder, and the user's own programs train and attach there", async () => {
  const packed = run(["npm", "pack", "--pack-destination", dir, "--loglevel=error"], ROOT, 60_000)
  expect(packed.status).toBe(0)
  const tarball = join(dir, packed.stdout.trim().split("\n").at(-1)!)
  expect(existsSync(tarball)).toBe(true)

  const app = join(dir, "app")
  mkdirSync(app)
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "my-job", private: true, type: "module" }))
  expect(run(["bun", "add", tarball], app, 240_000).status).toBe(0)
  expect(copiesOf("effect", join(app, "node_modules"))).toEqual([join(app, "node_modules/effect")])
  for (const f of ["train.ts", "resume.ts", "attach.ts"]) copyFileSync(join(APP, f), join(app, f))
  writeFileSync(join(app, "readme-imports.ts"), readmeImports())

  // Bun runs no install script of a dependency it was not told to trust, so the native library
  // is not built yet: a program says so and what to do; `monarch-bun build` builds it.
  const library = join(app, "node_modules/monarch-bun/build/libshim-cpu.so")
  expect(existsSync(library)).toBe(false)
  const unbuilt = Bun.spawnSync(["bun", "train.ts"], { cwd: app, env, stdout: "pipe", stderr: "pipe", timeout: 60_000 })
  expect(unbuilt.exitCode).not.toBe(0)
  expect(unbuilt.stderr.toString()).toContain(`${library} is not built: run \`make\` in a clone, or \`monarch-bun build\``)
  const built = run([join(app, "node_modules/.bin/monarch-bun"), "build"], app, 240_000)
  expect(built.status).toBe(0)
  expect(existsSync(library) ? "built" : `not built:\n${built.stdout}${built.stderr}`).toBe("built")
  // The programs typecheck against the package's exported types, under the tsconfig.json that
  // `bun init` writes and with Bun's types, as the user's editor would check them.
  const typesBun = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).devDependencies["@types/bun"]
  expect(run(["bun", "add", "-d", `@types/bun@${typesBun}`], app, 120_000).status).toBe(0)
  writeFileSync(join(app, "tsconfig.json"), JSON.stringify({
    compilerOptions: {
      lib: ["ESNext"], target: "ESNext", module: "Preserve", moduleDetection: "force", jsx: "react-jsx", allowJs: true, types: ["bun"],
      moduleResolution: "bundler", allowImportingTsExtensions: true, verbatimModuleSyntax: true, noEmit: true,
      strict: true, skipLibCheck: true, noFallthroughCasesInSwitch: true, noUncheckedIndexedAccess: true, noImplicitOverride: true,
    },
  }))
  const typed = run([join(ROOT, "node_modules/.bin/tsc"), "-p", "."], app, 60_000)
  expect(typed.stdout + typed.stderr).toBe("")

  const trained = run(["bun", "train.ts"], app, 60_000)
  expect(trained.status).toBe(0)
  const { losses, weights } = JSON.parse(trained.stdout.trim().split("\n").at(-1)!) as { losses: number[]; weights: number[] }
  expect(losses).toHaveLength(20)
  expect(losses.at(-1)!).toBeLessThan(losses[0]! / 1000)
  weights.forEach((w, k) => expect(Math.abs(w - 0.25 * (k + 1))).toBeLessThan(0.01))

  // The torch-side reader the README points to ships in the package.
  expect(existsSync(join(app, "node_modules/monarch-bun/python/monarch_safetensors.py"))).toBe(true)

  // What the README imports loads, every module by its name.
  const imported = run(["bun", "readme-imports.ts"], app, 60_000)
  expect(imported.status).toBe(0)
  const modules = JSON.parse(imported.stdout.trim().split("\n").at(-1)!) as Array<[string, number]>
  expect(modules.map(([m]) => m)).toEqual(expect.arrayContaining(["monarch-bun/controller", "monarch-bun/ops", "monarch-bun/optim"]))
  for (const [m, exports] of modules) expect({ module: m, exports: exports > 0 }).toEqual({ module: m, exports: true })

  // AdamW inside step scopes, through compile, and a resume from a checkpoint: bitwise the run never stopped.
  const resumed = run(["bun", "resume.ts"], app, 60_000)
  expect(resumed.status).toBe(0)
  const r = JSON.parse(resumed.stdout.trim().split("\n").at(-1)!) as { whole: { losses: number[]; weights: number[] }; resumed: { losses: number[]; weights: number[] }; traces: number[] }
  expect(r.whole.losses).toHaveLength(6)
  expect(r.whole.losses.at(-1)!).toBeLessThan(r.whole.losses[0]!)
  expect(r.resumed).toEqual(r.whole)
  expect(r.traces).toEqual([1, 1])

  // The package's command line: its launcher starting its workers, and a controller attaching.
  const port = await freePort()
  const token = `package-test-${crypto.randomUUID()}`
  const launcher = Bun.spawn([join(app, "node_modules/.bin/monarch-bun"), "launch", "--nproc", "2", "--store-port", String(port), "--", "worker"], {
    cwd: app, env: { ...env, MONARCH_TOKEN: token }, stdin: "ignore", stdout: "pipe", stderr: "pipe",
  })
  try {
    const attached = run(["bun", "attach.ts", String(port)], app, 60_000, { MONARCH_TOKEN: token })
    expect(attached.status).toBe(0)
    expect(JSON.parse(attached.stdout.trim().split("\n").at(-1)!)).toEqual([[6, 6], [6, 6]])
    expect(await launcher.exited).toBe(0)
  } finally {
    launcher.kill("SIGKILL")
  }
}, 400_000)
