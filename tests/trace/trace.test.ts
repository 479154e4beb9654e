// The timeline: with `trace` (or MONARCH_TRACE) each worker records every command's span per
// stream, and the controller merges them into one Chrome trace JSON, one process per rank and
// one thread per stream, with the viewer next to it; real headless Chromium then draws that
// viewer, and the tracks are checked in its DOM and in the screenshot's pixels.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, ManagedRuntime } from "effect"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { inflateSync } from "node:zlib"
import { browserMissing, renderedDom, screenshot } from "../../scripts/timeline.ts"
import { Controller } from "../../src/controller/index.ts"
import type { ChromeTrace } from "../../src/trace/merge.ts"
import { testUnless } from "../skip.ts"

type Span = { ph: string; name: string; cat: string; pid: number; tid: number; ts: number; dur: number; args?: { name?: string } }

const dir = mkdtempSync(join(tmpdir(), "monarch-trace-test-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** A small job on two ranks: calls, a dp all-reduce, a borrow onto a second stream, fetches. */
const job = (ctl: Controller["Service"]) =>
  Effect.scoped(Effect.gen(function* () {
    const mesh = yield* ctl.mesh({ dp: 2 })
    const x = yield* mesh.call("ops.ones", [[64, 64]])
    const y = yield* mesh.call("ops.matmul", [x, x])
    const s = yield* mesh.reduce(y, "dp", "sum")
    const side = yield* ctl.stream()
    const b = yield* mesh.borrow(s, side)
    const z = yield* mesh.call("ops.mul", [b, 2], {}, { stream: side })
    return yield* mesh.fetch(z, 1, { fn: "ops.sum" })
  }))

/** Runs the job under Controller.local; MONARCH_TRACE as the shell would set it, or the option. */
const traced = async (o: { option?: string; env?: string }): Promise<string[]> => {
  const before = process.env.MONARCH_TRACE
  if (o.env === undefined) delete process.env.MONARCH_TRACE
  else process.env.MONARCH_TRACE = o.env
  const rt = ManagedRuntime.make(Controller.local({ world: 2, onWorkerLine: () => {}, ...(o.option ? { trace: o.option } : {}) }))
  try {
    const ctl = await rt.runPromise(Effect.service(Controller))
    await rt.runPromise(job(ctl))
    // What each worker was told about tracing, from its environment.
    return ctl.workers().map((w) => readFileSync(`/proc/${w.pid}/environ`, "latin1").split("\0").find((e) => e.startsWith("MONARCH_TRACE_DIR=")) ?? "")
  } finally {
    await rt.dispose()
    if (before === undefined) delete process.env.MONARCH_TRACE
    else process.env.MONARCH_TRACE = before
  }
}

/** Pixels of a PNG as RGBA rows (8-bit, not interlaced: what Chromium writes). */
const decodePng = (bytes: Uint8Array): { width: number; height: number; pixel: (x: number, y: number) => [number, number, number] } => {
  const view = new DataView(bytes.buffer, bytes.byteOffset)
  let offset = 8, width = 0, height = 0, channels = 4
  const idat: Uint8Array[] = []
  while (offset < bytes.length) {
    const length = view.getUint32(offset), type = new TextDecoder().decode(bytes.subarray(offset + 4, offset + 8))
    const body = bytes.subarray(offset + 8, offset + 8 + length)
    if (type === "IHDR") {
      width = view.getUint32(offset + 8), height = view.getUint32(offset + 12)
      channels = { 2: 3, 6: 4 }[body[9]!] ?? 0
      if (body[8] !== 8 || channels === 0 || body[12] !== 0) throw new Error("not an 8-bit RGB(A) non-interlaced PNG")
    } else if (type === "IDAT") idat.push(body)
    offset += 12 + length
  }
  const raw = inflateSync(Buffer.concat(idat)), stride = width * channels
  const out = new Uint8Array(height * stride)
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]!, line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1))
    for (let i = 0; i < stride; i++) {
      const a = i >= channels ? out[y * stride + i - channels]! : 0, b = y > 0 ? out[(y - 1) * stride + i]! : 0
      const c = i >= channels && y > 0 ? out[(y - 1) * stride + i - channels]! : 0
      const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c)
      const predictor = [0, a, b, (a + b) >> 1, pa <= pb && pa <= pc ? a : pb <= pc ? b : c][filter]!
      out[y * stride + i] = (line[i]! + predictor) & 0xff
    }
  }
  return { width, height, pixel: (x, y) => [out[y * stride + x * channels]!, out[y * stride + x * channels + 1]!, out[y * stride + x * channels + 2]!] }
}

describe("a traced job", () => {
  const path = join(dir, "job.json")
  let spans: Span[] = []
  let meta: Span[] = []
  beforeAll(async () => {
    await traced({ option: path })
    const trace = JSON.parse(readFileSync(path, "utf8")) as ChromeTrace
    spans = trace.traceEvents.filter((e) => e.ph === "X") as Span[]
    meta = trace.traceEvents.filter((e) => e.ph === "M") as Span[]
  }, 60_000)

  test("one Chrome trace file: a process per rank, a thread per stream, each command a span where it ran", () => {
    expect(meta.filter((m) => m.name === "process_name").map((m) => m.args?.name)).toEqual(["rank 0", "rank 1"])
    for (const rank of [0, 1]) {
      const threads = meta.filter((m) => m.name === "thread_name" && m.pid === rank).map((m) => m.args?.name ?? "")
      expect(threads.filter((t) => /^stream \d+( \(default\))?$/.test(t)).length).toBe(2)
      const mine = spans.filter((s) => s.pid === rank)
      const byName = (name: string) => mine.find((s) => s.name === name)
      for (const [name, cat] of [["ops.ones", "call"], ["ops.matmul", "call"], ["all_reduce sum [dp]", "collective"], ["borrow: wait for its event", "wait"], ["ops.mul", "call"]] as const)
        expect({ name, cat: byName(name)?.cat }).toEqual({ name, cat })
      // The mul ran on the side stream, the matmul on the default one.
      expect(byName("ops.mul")!.tid).not.toBe(byName("ops.matmul")!.tid)
      expect(byName("ops.mul")!.tid).toBe(byName("borrow: wait for its event")!.tid)
      // Each stream's spans follow one another in the order the commands ran.
      for (const tid of new Set(mine.map((s) => s.tid))) {
        const track = mine.filter((s) => s.tid === tid)
        track.forEach((s, i) => {
          expect(s.dur).toBeGreaterThanOrEqual(0)
          if (i > 0) expect(s.ts).toBeGreaterThanOrEqual(track[i - 1]!.ts + track[i - 1]!.dur)
        })
      }
    }
    expect(spans.some((s) => s.pid === 1 && s.cat === "fetch" && s.name === "fetch ops.sum")).toBe(true)
  })

  testUnless(browserMissing())("the viewer, in headless Chromium, draws every track and span, and the screenshot shows them", () => {
    const html = join(dir, "job.html")
    expect(existsSync(html)).toBe(true)
    const dom = renderedDom(`file://${html}`)
    const tracks = new Set(spans.map((s) => `${s.pid}/${s.tid}`)).size
    expect(dom).toContain(`data-tracks="${tracks}"`)
    expect(dom).toContain(`data-spans="${spans.length}"`)
    expect(dom.match(/class="span /g)?.length).toBe(spans.length)
    expect(dom).toContain('data-track="rank 1 / stream')

    // Zoomed in (#from=&to=, ms from the first span), the axis counts in the header's clock: it starts at `from`, not at 0.
    const first = Math.min(...spans.map((s) => s.ts)), last = Math.max(...spans.map((s) => s.ts + s.dur))
    const from = (last - first) / 4000, to = (last - first) / 2000
    const zoomed = renderedDom(`file://${html}#from=${from.toFixed(3)}&to=${to.toFixed(3)}`)
    expect(zoomed).toContain(` from ${from.toFixed(3)} ms`)
    expect(/<div id="axis">(.*?)<\/div>/.exec(zoomed)?.[1]).toBe([from, (from + to) / 2, to].map((v) => `<span>${v.toFixed(1)} ms</span>`).join(""))

    const png = join(dir, "job.png")
    screenshot(`file://${html}`, png, "1200,400")
    const image = decodePng(readFileSync(png))
    // The "call" blue (#3b7dd8) and "collective" orange (#e0672b) are drawn in the lanes (right of the labels).
    const near = ([r, g, b]: number[], [R, G, B]: number[]) => Math.abs(r! - R!) + Math.abs(g! - G!) + Math.abs(b! - B!) < 40
    let blue = 0, orange = 0
    for (let y = 0; y < image.height; y++)
      for (let x = 220; x < image.width; x++) {
        const p = image.pixel(x, y)
        if (near(p, [0x3b, 0x7d, 0xd8])) blue++
        if (near(p, [0xe0, 0x67, 0x2b])) orange++
      }
    expect({ blue: blue > 50, orange: orange > 50 }).toEqual({ blue: true, orange: true })
  }, 60_000)
})

test("MONARCH_TRACE from the environment traces too; without it nothing is recorded", async () => {
  const path = join(dir, "env.json")
  expect((await traced({ env: path })).every((e) => e.startsWith("MONARCH_TRACE_DIR=/"))).toBe(true)
  expect((JSON.parse(readFileSync(path, "utf8")) as ChromeTrace).traceEvents.some((e) => e.ph === "X" && e.name === "ops.matmul")).toBe(true)
  // Untraced, the workers are given no trace folder, so their dispatch records nothing.
  expect(await traced({})).toEqual(["", ""])
}, 60_000)
