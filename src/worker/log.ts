/**
 * Logging for workers, the launcher and the controller: one line per entry on stderr,
 * `HH:MM:SS.mmm LEVEL [name] message`, at the level MONARCH_LOG names (debug, info, warn;
 * info by default).
 */
import { Cause, Layer, Logger, References, type LogLevel } from "effect"

const LEVELS: Readonly<Record<string, LogLevel.LogLevel>> = { debug: "Debug", info: "Info", warn: "Warn", error: "Error" }

/** The level MONARCH_LOG asks for. */
const logLevelFromEnv = (value = process.env.MONARCH_LOG): LogLevel.LogLevel => LEVELS[value?.toLowerCase() ?? ""] ?? "Info"

const render = (message: unknown): string =>
  (Array.isArray(message) ? message : [message]).map((m) => (typeof m === "string" ? m : Bun.inspect(m))).join(" ")

/** A logger for the process called `name` (e.g. "worker 3"), with the level from MONARCH_LOG. */
export const logLayer = (name: string, level: LogLevel.LogLevel = logLevelFromEnv()) =>
  Layer.mergeAll(
    Logger.layer([
      Logger.make(({ logLevel, message, cause, date }) => {
        const failure = cause.reasons.length > 0 ? `\n${Cause.pretty(cause)}` : ""
        process.stderr.write(`${date.toISOString().slice(11, 23)} ${logLevel.toUpperCase().padEnd(5)} [${name}] ${render(message)}${failure}\n`)
      }),
    ]),
    Layer.succeed(References.MinimumLogLevel, level),
  )
