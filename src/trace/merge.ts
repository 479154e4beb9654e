/**
 * The job's timeline: each rank's spans (writer.ts) merged into one Chrome trace / Perfetto JSON
 * file, one process per rank and one thread per stream, loadable as it is; next to it the same
 * trace in a self-contained HTML viewer (viewer.html, no network).
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import type { RankTrace } from "./writer.ts"

const VIEWER = new URL("./viewer.html", import.meta.url).pathname

export interface ChromeTrace {
  readonly traceEvents: ReadonlyArray<Readonly<Record<string, unknown>>>
  readonly displayTimeUnit: "ms"
}

/** The ranks' files in `dir` as one trace; a rank that wrote none is named in `missing`. */
export const mergeTraces = (dir: string, world: number): { trace: ChromeTrace; missing: number[] } => {
  const events: Array<Record<string, unknown>> = []
  const missing: number[] = []
  for (let rank = 0; rank < world; rank++) {
    const file = join(dir, `rank-${rank}.json`)
    if (!existsSync(file)) {
      missing.push(rank)
      continue
    }
    const r = JSON.parse(readFileSync(file, "utf8")) as RankTrace
    events.push({ ph: "M", name: "process_name", pid: rank, tid: 0, args: { name: `rank ${rank}` } })
    events.push({ ph: "M", name: "process_sort_index", pid: rank, tid: 0, args: { sort_index: rank } })
    for (const [tid, name] of Object.entries(r.tracks)) events.push({ ph: "M", name: "thread_name", pid: rank, tid: Number(tid), args: { name } })
    for (const s of r.spans) events.push({ ph: "X", name: s.name, cat: s.cat, pid: rank, tid: s.tid, ts: s.ts, dur: s.dur, ...(s.args ? { args: s.args } : {}) })
  }
  return { trace: { traceEvents: events, displayTimeUnit: "ms" }, missing }
}

/** The viewer with `trace` in it (`</` escaped so the data cannot end its script element). */
export const viewerHtml = (trace: ChromeTrace): string =>
  readFileSync(VIEWER, "utf8").replace("/*TRACE*/null", () => JSON.stringify(trace).replaceAll("</", "<\\/"))

/** Writes `path` (the JSON) and `path` with .html for .json (the viewer); returns the viewer's path. */
export const writeTrace = (path: string, trace: ChromeTrace): string => {
  writeFileSync(path, JSON.stringify(trace))
  const html = path.endsWith(".json") ? `${path.slice(0, -5)}.html` : `${path}.html`
  writeFileSync(html, viewerHtml(trace))
  return html
}
