/**
 * Where in the controller program a command was issued. Capturing is on the per-command path,
 * so it only takes the stack (an Error, whose text the engine formats lazily); the text, the
 * first frame outside the controller library, is worked out only when a report needs it (a
 * failure, a deadline, a hang). Formatting every command's stack cost ~8 us per command.
 */
const LIBRARY_FRAME = /\/src\/(controller|protocol|net)\/|\/node_modules\/|\(native\)|\(node:|\[native code\]/

export class CallSite {
  private text: string | undefined | null = null
  private constructor(private stack: Error | undefined) {}

  /**
   * Captures the top `frames` frames of the current stack: the library's own (this one, Core.site,
   * the API method and any between it and the user) and the user's. NOTE: the capture costs
   * with its depth, steeply: 60 frames measured ~4 us more per command than 8 under the Effect
   * runtime's stack, and 8 frames ~0.65 us against ~0.15 us for 4, so each entry point asks
   * for what it needs (Core.site) instead of one depth for all.
   */
  static capture(frames: number): CallSite {
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = frames
    const error = new Error()
    Error.stackTraceLimit = limit
    return new CallSite(error)
  }

  /** The user's frame, "fn (/path/file.ts:line:col)", or undefined when none was on the stack. */
  format(): string | undefined {
    if (this.text === null) {
      const line = this.stack?.stack?.split("\n").slice(1).find((l) => l.includes("(/") && !LIBRARY_FRAME.test(l))
      this.text = line?.trim().replace(/^at /, "")
      this.stack = undefined
    }
    return this.text
  }
}
