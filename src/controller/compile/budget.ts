/**
 * The recordings this controller has defined on its workers, across every compiled step, kept
 * within what a worker holds (src/protocol/recordingLimits.ts): before a new one is defined,
 * the ones called least recently are deleted until it fits, so a worker never has to refuse one.
 */
import type { RecordingLimits } from "../../protocol/recordingLimits.ts"

interface Held {
  readonly commands: number
  usedAt: number
  /** Deletes it on the workers and from its compiled step (which then traces again). */
  readonly evict: () => void
}

export class RecordingBudget {
  private readonly held = new Map<number, Held>()
  private commands = 0
  private clock = 0

  constructor(readonly limits: RecordingLimits) {}

  /**
   * Makes room for recording `id` of `commands` commands, evicting others, and counts it; a
   * message when it cannot fit even alone.
   */
  admit(id: number, commands: number, evict: () => void): string | undefined {
    if (commands > this.limits.commands)
      return `the step records ${commands} commands, more than a worker keeps in its recordings (MONARCH_MAX_RECORDED_COMMANDS=${this.limits.commands})`
    while (this.held.size >= this.limits.recordings || this.commands + commands > this.limits.commands) {
      let oldest: number | undefined
      for (const [held, h] of this.held) if (oldest === undefined || h.usedAt < this.held.get(oldest)!.usedAt) oldest = held
      const { evict } = this.held.get(oldest!)!
      this.forget(oldest!)
      evict()
    }
    this.held.set(id, { commands, usedAt: ++this.clock, evict })
    this.commands += commands
    return undefined
  }

  /** Recording `id` was called. */
  touch(id: number): void {
    const h = this.held.get(id)
    if (h !== undefined) h.usedAt = ++this.clock
  }

  /** Recording `id` was deleted on the workers. */
  forget(id: number): void {
    const h = this.held.get(id)
    if (h === undefined) return
    this.held.delete(id)
    this.commands -= h.commands
  }
}
