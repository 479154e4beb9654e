/**
 * A test controller for workers that someone else starts (torchrun): a real listener
 * (src/controller/listener.ts) with a fresh token, what each rank sent, and helpers to send
 * commands and await replies. tests/worker/harness.ts is the same for our own launcher.
 */
import { Effect, Exit, Scope } from "effect"
import { listen, type WorkerLink } from "../../src/controller/listener.ts"
import type { ControllerMessage, WorkerHello, WorkerMessage } from "../../src/protocol/messages.ts"

type Tag = ControllerMessage["_tag"]
type Of<T extends Tag> = Extract<ControllerMessage, { _tag: T }>

export interface Controller {
  /** CONTROLLER_ADDR for the workers. */
  readonly address: string
  /** MONARCH_TOKEN for the workers. */
  readonly token: string
  /** Resolves once `world` ranks have said hello; `output` is shown if they do not in time. */
  hellos(world: number, timeoutMs: number, output: () => ReadonlyArray<string>): Promise<void>
  hello(rank: number): WorkerHello
  send(ranks: number | "all", msg: WorkerMessage): void
  /** The next message of `tag` from `rank`, after those already taken. */
  next<T extends Tag>(rank: number, tag: T, timeoutMs?: number): Promise<Of<T>>
  /** Messages of `tag` from any rank so far. */
  seen<T extends Tag>(tag: T): Of<T>[]
  close(): Promise<void>
}

export const startController = async (): Promise<Controller> => {
  const scope = Effect.runSync(Scope.make())
  const token = `token-${crypto.randomUUID()}`
  const links = new Map<number, WorkerLink>()
  const received = new Map<number, ControllerMessage[]>()
  const taken = new Map<string, number>()
  const problems: string[] = []
  const wakers = new Set<() => void>()
  const wake = () => { for (const w of [...wakers]) w() }
  const log = (rank: number) => {
    if (!received.has(rank)) received.set(rank, [])
    return received.get(rank)!
  }

  const listener = await Effect.runPromise(Scope.provide(scope)(listen({
    token,
    onWorker: (link) => { links.set(link.hello.rank, link); log(link.hello.rank).push(link.hello); wake() },
    onMessage: (rank, msg) => { log(rank).push(msg); wake() },
    onDisconnect: () => wake(),
    onProblem: (p) => { problems.push(p); wake() },
  })))

  const waitFor = <A>(what: () => A | undefined, timeoutMs: number, label: () => string): Promise<A> =>
    new Promise((resolve, reject) => {
      const check = () => {
        const v = what()
        if (v === undefined) return
        wakers.delete(check)
        clearTimeout(timer)
        resolve(v)
      }
      const timer = setTimeout(() => {
        wakers.delete(check)
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${label()}`))
      }, timeoutMs)
      wakers.add(check)
      check()
    })

  return {
    address: listener.address,
    token,
    hellos: (world, timeoutMs, output) =>
      waitFor(() => (links.size === world ? true : undefined), timeoutMs,
        () => `${world} hellos (got ${links.size}; problems: ${JSON.stringify(problems)})\n${output().join("\n")}`).then(() => undefined),
    hello: (rank) => links.get(rank)!.hello,
    send: (ranks, msg) => {
      for (const r of ranks === "all" ? [...links.keys()] : [ranks]) links.get(r)!.send(msg)
    },
    next: (rank, tag, timeoutMs = 20_000) =>
      waitFor(() => {
        const from = taken.get(`${rank}/${tag}`) ?? 0
        const list = log(rank)
        const i = list.findIndex((m, j) => j >= from && m._tag === tag)
        if (i < 0) return undefined
        taken.set(`${rank}/${tag}`, i + 1)
        return list[i] as Of<typeof tag>
      }, timeoutMs, () => `${tag} from rank ${rank}; received: ${JSON.stringify(log(rank).map((m) => m._tag))}`),
    seen: (tag) => [...received.values()].flat().filter((m) => m._tag === tag) as Of<typeof tag>[],
    close: () => Effect.runPromise(Scope.close(scope, Exit.void)),
  }
}
