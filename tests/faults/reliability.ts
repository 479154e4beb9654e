/**
 * The fault scenarios as rows of the reliability table (the contract every
 * tests/<area>/reliability.ts follows): each scenario run a few times (more in long mode),
 * `held` = the tries where every condition held, `detail` = what the program saw and the
 * times measured from fault to error. faults.test.ts runs the same scenarios.
 */
import { BACKLOG, controllerAndStoreKilled, controllerKilled, controllerReplacedThroughStore, listenerRebound, ORPHAN_TIMEOUT_MS } from "./controller_loss.ts"
import { COMM_TIMEOUT_MS as DISAGREE_COMM_TIMEOUT_MS, DISAGREEMENT_MS, disagreeOnOpAndRoot } from "./disagree.ts"
import { COMM_TIMEOUT_MS, killWorker } from "./kill.ts"
import { COMM_TIMEOUT_MS as LOSS_COMM_TIMEOUT_MS, collectiveAfterLoss, supervisedAfterLoss } from "./peer_lost.ts"
import { defaultLimit, LIMIT_MIB, overTheLimit } from "./memory.ts"
import { COMM_TIMEOUT_MS as PRECISE_COMM_TIMEOUT_MS, DEADLINE_MS, lostRankPrecisely, stoppedWorker } from "./precise.ts"
import { controllerKeyNeverSet, missingKey, STORE_TIMEOUT_MS, storeKilled } from "./store_loss.ts"
import { summarise, type Trial } from "./trial.ts"
import type { Mode, ReliabilityRow } from "../reliability.ts"



export interface Scenario {
  readonly check: string
  /** What every try that held showed, before the figures. */
  readonly outcome: string
  readonly tries: Readonly<Record<Mode, number>>
  /** An upper bound on one try, for test timeouts. */
  readonly tryMs: number
  readonly once: () => Promise<Trial>
}

const comm = `comm timeout ${COMM_TIMEOUT_MS / 1000} s`, store = `store timeout ${STORE_TIMEOUT_MS / 1000} s`

export const scenarios: ReadonlyArray<Scenario> = [
  {
    check: `kill -9 of rank 3 while rank 2 waits for it in an all_reduce (2x2 mesh, ${comm})`,
    outcome: "fetch: WorkerLost rank 3 (137, SIGKILL); rank 2 reported CommError (shim_all_reduce); earlier fetches, other row, its collectives intact",
    tries: { default: 2, long: 10 }, tryMs: 30_000, once: () => killWorker("blocked, group opened"),
  },
  {
    check: `kill -9 of rank 3 while rank 2 opens their group's communicator (rendezvous, ${comm})`,
    outcome: "fetch: WorkerLost rank 3 at once; rank 2, told of the loss, reported CommError (rendezvous) at once; earlier fetches, other row intact",
    tries: { default: 1, long: 10 }, tryMs: 30_000, once: () => killWorker("blocked, group not yet opened"),
  },
  {
    check: `kill -9 of rank 3 inside an all_reduce rank 2 joins 0.7 s later (${comm})`,
    outcome: "fetch: WorkerLost rank 3 (137, SIGKILL) at once; rank 2 went on (CommError: rank 3 reported lost before it joined, or the transport saw it go; or the all_reduce completed with rank 3's input already in); earlier fetches, other row intact",
    tries: { default: 2, long: 10 }, tryMs: 30_000, once: () => killWorker("inside a collective"),
  },
  {
    check: `kill -9 of rank 3 inside an all_reduce rank 2 joins 0.7 s later, Gloo TCP only (MONARCH_COMM_SHM=0, ${comm})`,
    outcome: "fetch: WorkerLost rank 3 (137, SIGKILL) at once; rank 2 reported CommError on joining (rank 3 reported lost, or shim_all_reduce); earlier fetches, other row intact",
    tries: { default: 1, long: 10 }, tryMs: 30_000, once: () => killWorker("inside a collective", true),
  },
  {
    check: "kill -9 of rank 3 with a fetch of its value in flight",
    outcome: "fetch: WorkerLost rank 3 (137, SIGKILL); earlier fetches, other row intact",
    tries: { default: 2, long: 10 }, tryMs: 30_000, once: () => killWorker("fetch in flight"),
  },
  {
    check: "kill -9 of rank 3 idle between commands",
    outcome: "next fetch from it: WorkerLost rank 3 (137, SIGKILL); earlier fetches, other row intact",
    tries: { default: 2, long: 10 }, tryMs: 30_000, once: () => killWorker("idle"),
  },
  {
    check: `kill -9 of rank 1 while rank 0 waits for it in a dp all_reduce's rendezvous, rank-local work queued behind (dp=2, comm timeout ${LOSS_COMM_TIMEOUT_MS / 1000} s)`,
    outcome: "fetch: WorkerLost rank 1; rank 0's queued rank-local work answered; an all_reduce issued after the loss failed WorkerLost rank 1 at once, not sent to rank 0; rank 0's values intact",
    tries: { default: 1, long: 10 }, tryMs: 3 * LOSS_COMM_TIMEOUT_MS, once: collectiveAfterLoss,
  },
  {
    check: `supervise: kill -9 of rank 1, then the body's dp all_reduce (dp=2, comm timeout ${LOSS_COMM_TIMEOUT_MS / 1000} s)`,
    outcome: "the body failed WorkerLost rank 1 at once, ran again on fresh workers and all-reduced",
    tries: { default: 1, long: 10 }, tryMs: 3 * LOSS_COMM_TIMEOUT_MS, once: supervisedAfterLoss,
  },
  {
    check: `members disagreeing on an all_reduce's or reduce_scatter's op, or a broadcast's root (2 members, shared memory and TCP, comm timeout ${DISAGREE_COMM_TIMEOUT_MS / 1000} s)`,
    outcome: `every member failed each call with "members disagree" within ${DISAGREEMENT_MS / 1000} s, then all-reduced right`,
    tries: { default: 1, long: 10 }, tryMs: 60_000, once: disagreeOnOpAndRoot,
  },
  {
    check: "kill -9 of rank 3 with work in flight on the whole 2x2 mesh",
    outcome: "in flight: rank 1's and rank 2's own results of a rank-local op and the top row's tp sum completed; rank 3's result: WorkerLost; afterwards on the same mesh new rank-local work and top-row sums completed, the bottom row's sum failed WorkerLost rank 3",
    tries: { default: 1, long: 10 }, tryMs: 30_000, once: lostRankPrecisely,
  },
  {
    check: `SIGSTOP of rank 3 inside a tp all_reduce (2x2 mesh, comm timeout ${PRECISE_COMM_TIMEOUT_MS / 1000} s), then SIGCONT`,
    outcome: `while stopped: the top row's values answered at once; a fetch needing rank 3 with a ${DEADLINE_MS / 1000} s deadline failed DeadlineExceeded naming rank 3; the hang report named [2, 3]; rank 2's CommError named global rank 3; after SIGCONT the group's communicator was opened again and tp sums completed on every rank`,
    tries: { default: 1, long: 10 }, tryMs: 40_000, once: () => stoppedWorker(),
  },
  {
    check: `SIGSTOP of rank 3 inside a tp all_reduce, then SIGCONT, Gloo TCP only (MONARCH_COMM_SHM=0, comm timeout ${PRECISE_COMM_TIMEOUT_MS / 1000} s)`,
    outcome: "as over shared memory; rank 2's CommError (Gloo's timeout, which names no peer) named the group by global ranks [2, 3]",
    tries: { default: 1, long: 10 }, tryMs: 40_000, once: () => stoppedWorker(true),
  },
  {
    check: `controller killed (kill -9) with ${BACKLOG.commands} commands of ${BACKLOG.holdMs} ms queued, workers not restartable`,
    outcome: "every worker dropped the backlog once its running command ended and exited with status 3 (link lost), logging why",
    tries: { default: 2, long: 10 }, tryMs: 40_000, once: controllerKilled,
  },
  {
    check: `controller and store killed (kill -9), restartable workers (orphan timeout ${ORPHAN_TIMEOUT_MS / 1000} s)`,
    outcome: "every worker waited out its orphan timeout, then exited with status 3 (link lost), logging why",
    tries: { default: 1, long: 10 }, tryMs: 40_000, once: controllerAndStoreKilled,
  },
  {
    check: "controller killed (kill -9), restartable workers; next controller found through the store",
    outcome: "same worker processes waited, reconnected and all-reduced for the new controller",
    tries: { default: 1, long: 10 }, tryMs: 45_000, once: controllerReplacedThroughStore,
  },
  {
    check: "listener closes every link, restartable workers; same CONTROLLER_ADDR port re-bound 1.2 s later",
    outcome: "workers waited, reconnected and answered the new listener",
    tries: { default: 1, long: 10 }, tryMs: 45_000, once: listenerRebound,
  },
  {
    check: `store killed (kill -9) after rendezvous, 2x2 mesh (${store})`,
    outcome: "calls, tp all_reduces, fetches went on; a dp reduce (new communicator) failed: RemoteError CommError naming the rendezvous key and the store",
    tries: { default: 1, long: 10 }, tryMs: 40_000, once: storeKilled,
  },
  {
    check: `worker with no CONTROLLER_ADDR and no controller key in the store (${store})`,
    outcome: "start-up failed after MONARCH_CONNECT_TIMEOUT_MS, the log naming the missing monarch/controller, non-zero exit",
    tries: { default: 1, long: 10 }, tryMs: 40_000, once: controllerKeyNeverSet,
  },
  {
    check: `ops.zeros of 100 MB per rank with MONARCH_MEMORY_LIMIT=${LIMIT_MIB}MiB (2 workers)`,
    outcome: "fetch: RemoteError ShimError naming the memory limit, at once; earlier values intact, 16 MB allocated after, memory given back",
    tries: { default: 1, long: 10 }, tryMs: 30_000, once: overTheLimit,
  },
  {
    check: "ops.zeros of 1.5 x host memory per rank, default memory limit (2 workers)",
    outcome: "each worker's limit was 80% of host memory / 2; fetch: RemoteError ShimError naming the memory limit, at once",
    tries: { default: 1, long: 10 }, tryMs: 30_000, once: defaultLimit,
  },
  {
    check: `store client get of a key never set (${store})`,
    outcome: "StoreTimeout naming the key; the client worked afterwards",
    tries: { default: 1, long: 10 }, tryMs: 15_000, once: missingKey,
  },
]

/** Runs one scenario `tries` times, in turn: its row, and the problems of the tries that failed. */
export const runScenario = async (s: Scenario, tries: number): Promise<{ row: ReliabilityRow; problems: string[] }> => {
  const trials: Trial[] = []
  for (let i = 0; i < tries; i++) trials.push(await s.once())
  const held = trials.filter((t) => t.problems.length === 0).length
  const problems = trials.flatMap((t, i) => t.problems.map((p) => `try ${i + 1}: ${p}`))
  const failed = held < tries ? `; first problem: ${problems[0]!.split("\n")[0]}` : ""
  return { row: { area: "faults", check: s.check, tries, held, detail: `${s.outcome}; ${summarise(trials)}${failed}` }, problems }
}

export const run = async (mode: Mode): Promise<ReliabilityRow[]> => {
  const rows: ReliabilityRow[] = []
  for (const s of scenarios) rows.push((await runScenario(s, s.tries[mode])).row)
  return rows
}
