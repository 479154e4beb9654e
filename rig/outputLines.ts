/**
 * A child process's stdout and stderr kept line by line as they arrive, and a wait for a
 * condition over them: HostProcess (a process in a host) and the launcher tests' Launcher share it.
 */
/** Appends each line of `stream` to `into` as it arrives (the last one unterminated too), calling `onLines` after each chunk. */
export const readLines = async (stream: ReadableStream<Uint8Array>, into: string[], onLines: () => void = () => {}): Promise<void> => {
  const decoder = new TextDecoder()
  let pending = ""
  for await (const chunk of stream) {
    const parts = (pending + decoder.decode(chunk, { stream: true })).split("\n")
    pending = parts.pop()!
    into.push(...parts)
    onLines()
  }
  if (pending) into.push(pending)
}

export class OutputLines {
  readonly stdout: string[] = []
  readonly stderr: string[] = []
  /** Settles once both streams have ended. */
  readonly drained: Promise<void>
  private readonly wakers = new Set<() => void>()

  constructor(stdout: ReadableStream<Uint8Array>, stderr: ReadableStream<Uint8Array>) {
    this.drained = Promise.all([this.pump(stdout, this.stdout), this.pump(stderr, this.stderr)]).then(() => {})
  }

  /** Checks every pending wait again (a line came, or something else a condition reads changed). */
  wake(): void {
    for (const w of [...this.wakers]) w()
  }

  private pump(stream: ReadableStream<Uint8Array>, into: string[]): Promise<void> {
    return readLines(stream, into, () => this.wake())
  }

  /**
   * The first value `check` gives (undefined: not yet; an Error: give up with it), checked now
   * and at every wake; after `timeoutMs` it rejects with the message `late` gives.
   */
  when<A>(check: () => A | Error | undefined, timeoutMs: number, late: () => string): Promise<A> {
    return new Promise((resolve, reject) => {
      const test = () => {
        const got = check()
        if (got === undefined) return
        finish()
        if (got instanceof Error) reject(got)
        else resolve(got)
      }
      const finish = () => {
        this.wakers.delete(test)
        clearTimeout(timer)
      }
      const timer = setTimeout(() => (finish(), reject(new Error(late()))), timeoutMs)
      this.wakers.add(test)
      test()
    })
  }
}
