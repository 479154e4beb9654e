/**
 * A worker's timeline (MONARCH_TRACE_DIR): the start and end of every command it runs, on the
 * track of the stream it runs on (control messages on their own track), kept in memory and
 * written as `rank-<r>.json` when the worker ends, for the controller to merge (merge.ts).
 * Times are microseconds since the epoch, so the ranks of one host line up. Only a worker
 * with tracing on makes a TraceWriter; the dispatch of one without it is unchanged.
 */
import { renameSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import type { WorkerMessage } from "../protocol/messages.ts"

/** One span: a Chrome trace "complete" event, before the merge gives it its process. */
export interface Span {
  readonly name: string
  /** call, collective, send, fetch, wait or control. */
  readonly cat: string
  /** The stream's ref id, or 0 for control messages. */
  readonly tid: number
  readonly ts: number
  readonly dur: number
  readonly args?: Readonly<Record<string, unknown>>
}

/** What a rank writes: its spans and what each track is. */
export interface RankTrace {
  readonly rank: number
  readonly tracks: Readonly<Record<number, string>>
  readonly spans: ReadonlyArray<Span>
}

export const CONTROL_TRACK = 0
/** The communication thread's track (after every stream's): each collective in flight from when it began to when it ended there. */
export const COMM_TRACK = 2 ** 31 - 1

/** Microseconds since the epoch, to the fraction the clock gives. */
export const nowMicros = (): number => (performance.timeOrigin + performance.now()) * 1000

/** What a Reduce runs (docs/design.md, Reduce): stack gathers, scatter splits. */
const collectiveName = (reduction: string, scatter: boolean): string =>
  reduction === "stack" ? (scatter ? "all_to_all" : "all_gather") : `${scatter ? "reduce_scatter" : "all_reduce"} ${reduction}`

export class TraceWriter {
  private readonly spans: Span[] = []
  private readonly tracks = new Map<number, string>([[CONTROL_TRACK, "control"]])
  /** Each borrow's streams, from its BorrowCreate, to place its later steps. */
  private readonly borrows = new Map<number, { readonly from: number; readonly to: number }>()

  constructor(readonly rank: number, private readonly dir: string) {}

  /** Records a collective that ran on the communication thread from `began` to `ended` (microseconds since the epoch). */
  comm(name: string, ident: number, began: number, ended: number): void {
    if (!this.tracks.has(COMM_TRACK)) this.tracks.set(COMM_TRACK, "communication thread")
    if (began <= 0 || ended < began) return
    this.spans.push({ name, cat: "collective", tid: COMM_TRACK, ts: began, dur: ended - began, args: { ident } })
  }

  /** Records a command's wait, on `stream`'s track, for the collective in flight `ident` to end. */
  waited(name: string, ident: number, stream: number, from: number, to: number): void {
    this.spans.push({ name: `wait for ${name}`, cat: "wait", tid: stream, ts: from, dur: Math.max(0, to - from), args: { ident } })
  }

  /** Records `m` as run from `start` until now. A CommandGroup is left to its commands. */
  record(m: WorkerMessage, start: number): void {
    const end = nowMicros()
    const span = this.describe(m)
    if (span === undefined) return
    if (!this.tracks.has(span.tid)) this.tracks.set(span.tid, `stream ${span.tid}`)
    this.spans.push({ ...span, ts: start, dur: Math.max(0, end - start) })
  }

  private describe(m: WorkerMessage): Omit<Span, "ts" | "dur"> | undefined {
    switch (m._tag) {
      case "CommandGroup":
        return undefined
      case "CallFunction":
        return { name: m.function, cat: "call", tid: m.stream.id, args: { ident: m.ident } }
      case "FetchValue":
        return { name: m.function === null ? "fetch" : `fetch ${m.function}`, cat: "fetch", tid: m.stream.id, args: { ident: m.ident } }
      case "Reduce":
        return { name: `${collectiveName(m.reduction, m.scatter)} [${m.dims.join(", ")}]`, cat: "collective", tid: m.stream.id, args: { ident: m.ident } }
      case "SendTensor":
        return { name: "send", cat: "send", tid: m.stream.id, args: { ident: m.ident } }
      case "CreateStream":
        this.tracks.set(m.result.id, `stream ${m.result.id}${m.default ? " (default)" : ""}`)
        return { name: m._tag, cat: "control", tid: CONTROL_TRACK }
      case "BorrowCreate":
        this.borrows.set(m.result.id, { from: m.from.id, to: m.to.id })
        return { name: "borrow: record event", cat: "wait", tid: m.from.id }
      case "BorrowFirstUse":
        return { name: "borrow: wait for its event", cat: "wait", tid: this.borrows.get(m.borrow)?.to ?? CONTROL_TRACK }
      case "BorrowLastUse":
        return { name: "borrow: record last use", cat: "wait", tid: this.borrows.get(m.borrow)?.to ?? CONTROL_TRACK }
      case "BorrowDrop": {
        const b = this.borrows.get(m.borrow)
        this.borrows.delete(m.borrow)
        return { name: "borrow: drop, wait for the last use", cat: "wait", tid: b?.from ?? CONTROL_TRACK }
      }
      default:
        return { name: m._tag, cat: "control", tid: CONTROL_TRACK }
    }
  }

  /** Writes `rank-<r>.json` into the trace folder. */
  write(): string {
    const path = join(this.dir, `rank-${this.rank}.json`)
    const trace: RankTrace = { rank: this.rank, tracks: Object.fromEntries(this.tracks), spans: this.spans }
    // Whole or not at all: the controller may be waiting for the file to appear.
    writeFileSync(`${path}.partial`, JSON.stringify(trace))
    renameSync(`${path}.partial`, path)
    return path
  }
}
