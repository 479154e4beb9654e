// The README's commands install what each needs (scripts/setup.sh's modes): `make demo` installs
// no chromium, `make test` does, `build` neither torch nor chromium. The script runs for real
// against a PATH where nothing but its own tools is found, with apt-get, sudo and npm replaced by
// scripts that note what they were asked to install (nothing is installed).
import { afterAll, expect, test } from "bun:test"
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

const ROOT = join(import.meta.dir, "../..")
const dir = mkdtempSync(join(tmpdir(), "monarch-setup-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const bin = join(dir, "bin"), log = join(dir, "asked")
mkdirSync(bin)
mkdirSync(join(dir, "repo/scripts"), { recursive: true })
copyFileSync(join(ROOT, "scripts/setup.sh"), join(dir, "repo/scripts/setup.sh"))
const tool = (name: string, body: string) => {
  writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`)
  chmodSync(join(bin, name), 0o755)
}
tool("apt-get", `echo "apt-get $*" >> ${log}`)
tool("sudo", `"$@"`)
tool("id", "echo 0")
tool("npm", `echo "npm $*" >> ${log}`)
// The torch check runs /usr/bin/python3 by its path: MONARCH_NO_TORCH=1 keeps the test independent of it.
const asked = (mode: string, env: Record<string, string> = {}) => {
  rmSync(log, { force: true })
  const r = Bun.spawnSync(["/bin/bash", "scripts/setup.sh", mode], { cwd: join(dir, "repo"), env: { PATH: bin, MONARCH_NO_TORCH: "1", ...env }, stdout: "pipe", stderr: "pipe" })
  let lines: string[] = []
  try { lines = readFileSync(log, "utf8").trim().split("\n") } catch {}
  return { status: r.exitCode, install: lines.find((l) => l.startsWith("apt-get install")) ?? "", stderr: r.stderr.toString() }
}

test("each mode installs what its command needs: chromium for the tests only", () => {
  const demo = asked("demo"), all = asked("test"), build = asked("build"), bare = asked("test", { MONARCH_NO_BROWSER: "1" })
  for (const r of [demo, all, build, bare]) expect({ status: r.status, iproute: r.install.includes("iproute2") }).toEqual({ status: 0, iproute: true })
  expect(demo.install).not.toContain("chromium")
  expect(build.install).not.toContain("chromium")
  expect(all.install).toContain("chromium")
  expect(bare.install).not.toContain("chromium")
  expect(asked("")).toMatchObject({ install: expect.stringContaining("chromium") })
  expect(asked("nope")).toMatchObject({ status: 2, stderr: expect.stringContaining("unknown mode 'nope'") })
})
