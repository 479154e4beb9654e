// `make demo` (examples/gpt.ts), shortened to 60 steps: what the README says it prints is there
// and true: the loss falls, the steps ran through one recording, the held-out accuracy and samples, the comparison with torch (when
// torch is present), the deliberate failure on rank 3 reaching the fetch with its remote error
// and call site, and one more step after it.
import { expect, test } from "bun:test"
import { torchMissing } from "../../examples/gpt/twin.ts"

const DEMO = new URL("../../examples/gpt.ts", import.meta.url).pathname

test("the demo trains, evaluates, compares with torch, survives a failed rank", async () => {
  const child = Bun.spawn([process.execPath, DEMO], { env: { ...process.env, MONARCH_DEMO_STEPS: "60" }, stdout: "pipe", stderr: "pipe" })
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`the demo exited ${code}:\n${out}\n${err}`)
  const losses = [...out.matchAll(/^step +\d+\/60 \[[#.]{20}\] loss ([\d.]+)$/gm)].map((m) => Number(m[1]))
  expect(losses.length).toBe(4) // steps 1, 20, 40, 60
  expect(losses.at(-1)!).toBeLessThan(losses[0]! / 2)
  // Every step went through one recording: traced once (its second call), replayed after.
  expect(out).toMatch(/^60 steps in [\d.]+ s, through compile\(trainStep\): 1 trace, the rest replays$/m)
  const accuracy = /held-out accuracy: ([\d.]+)% of 256 problems never trained on/.exec(out)
  expect(accuracy).not.toBeNull()
  expect([...out.matchAll(/^ {2}\d{5}=\d{5} (right|wrong)$/gm)].length).toBe(5)
  if (torchMissing() === undefined) {
    const worst = /the largest relative difference of 60 losses is ([\d.e+-]+)/.exec(out)
    expect(worst).not.toBeNull()
    expect(Number(worst![1])).toBeLessThan(1e-4)
  } else expect(out).toContain("no comparison with torch")
  expect(out).toMatch(/rank 3: command \d+ \(examples\/gpt\/shards:checkRows\) failed with RangeError: rank 3's rows \(dp=1\) hold a token outside the vocabulary/)
  expect(out).toMatch(/issued at .*examples\/gpt\.ts:\d+/)
  expect(out).toMatch(/the mesh goes on: one more step, loss [\d.]+\ndone in/)
}, 120_000)
