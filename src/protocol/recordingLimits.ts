/**
 * How much a worker keeps of DefineRecordings: recordings at once, and commands in them
 * together. A worker refuses a DefineRecording past either (a ProtocolError naming the bound and
 * its variable); the controller deletes the recordings called least recently before a new one
 * would pass them. Both sides read MONARCH_MAX_RECORDINGS and MONARCH_MAX_RECORDED_COMMANDS the
 * same way, so that a job sets them once for all. Measured (tests/worker/recordingLimits.test.ts),
 * a worker's RSS grows about 800 bytes a recorded command, so the default command bound keeps
 * that near 200 MiB.
 */

export interface RecordingLimits {
  readonly recordings: number
  readonly commands: number
}

export const DEFAULT_RECORDING_LIMITS: RecordingLimits = { recordings: 1024, commands: 1 << 18 }

/** The limits the environment sets (the defaults where it sets none), or why it is unusable. */
export const readRecordingLimits = (env: Readonly<Record<string, string | undefined>> = process.env): { readonly limits: RecordingLimits } | { readonly problem: string } => {
  const read = (name: string, fallback: number): number | string => {
    const raw = env[name]
    if (raw === undefined || raw === "") return fallback
    const n = Number(raw)
    return Number.isSafeInteger(n) && n >= 1 ? n : `${name}=${raw} is not a positive integer`
  }
  const recordings = read("MONARCH_MAX_RECORDINGS", DEFAULT_RECORDING_LIMITS.recordings)
  const commands = read("MONARCH_MAX_RECORDED_COMMANDS", DEFAULT_RECORDING_LIMITS.commands)
  if (typeof recordings === "string") return { problem: recordings }
  if (typeof commands === "string") return { problem: commands }
  return { limits: { recordings, commands } }
}
