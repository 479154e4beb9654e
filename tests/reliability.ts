/**
 * The contract between each area's checks (tests/<area>/reliability.ts) and the table that
 * scripts/reliability.ts writes to RELIABILITY.md: every area exports
 * `run(mode): Promise<ReliabilityRow[]>`, and its bun tests assert on the same rows.
 */

/** One line of the table: a check, how many times it was tried, and how many held. */
export interface ReliabilityRow {
  readonly area: string
  readonly check: string
  readonly tries: number
  /** Tries that met every condition of the check. */
  readonly held: number
  /** The figures measured (times, sizes, counts). */
  readonly detail: string
}

/** `default`: the short runs `make test` does; `long`: the full counts. */
export type Mode = "default" | "long"

/** MONARCH_LONG=1 or `--long` selects the long mode. */
export const modeFromEnv = (): Mode => (process.env.MONARCH_LONG === "1" || process.argv.includes("--long") ? "long" : "default")
