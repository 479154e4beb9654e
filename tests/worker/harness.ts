/**
 * The tests' raw-message controller: rig/workers.ts with the workers' user functions at
 * tests/worker/fixtures.
 */
import { startWorkers as start, type HarnessOptions } from "../../rig/workers.ts"

export type { Harness, HarnessOptions } from "../../rig/workers.ts"

export const FIXTURES = new URL("./fixtures", import.meta.url).pathname

/** Starts `world` workers that may call the fixtures' functions, and waits until every one has said hello. */
export const startWorkers = (o: HarnessOptions) => start({ functionPath: FIXTURES, ...o })
