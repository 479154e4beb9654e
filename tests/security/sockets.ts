/**
 * The TCP sockets a process is listening on, read from /proc: its socket inodes
 * (/proc/<pid>/fd) matched against the LISTEN rows of /proc/<pid>/net/tcp and tcp6.
 */
import { readdirSync, readFileSync, readlinkSync } from "node:fs"

export interface ListeningSocket {
  /** Dotted IPv4 or a compact IPv6 address, e.g. "127.0.0.1", "0.0.0.0", "::1", "::". */
  readonly address: string
  readonly port: number
}

const LISTEN = "0A"

/** /proc's hex address (IPv4: one little-endian u32; IPv6: four of them) as text. */
const decodeAddress = (hex: string): string => {
  const words = hex.match(/.{8}/g)!.map((w) => w.match(/../g)!.reverse().join(""))
  if (words.length === 1) return words[0]!.match(/../g)!.map((b) => parseInt(b, 16)).join(".")
  const groups = words.join("").match(/.{4}/g)!.map((g) => parseInt(g, 16).toString(16))
  const mapped = groups.slice(0, 5).every((g) => g === "0") && groups[5] === "ffff"
  if (mapped) return `::ffff:${words[3]!.match(/../g)!.map((b) => parseInt(b, 16)).join(".")}`
  return groups.join(":").replace(/(^|:)0(:0)+(:|$)/, "::")
}

/** Every TCP socket `pid` (default: this process) is listening on. */
export const listeningSockets = (pid: number | "self" = "self"): ListeningSocket[] => {
  const inodes = new Set<string>()
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const target = readlinkSync(`/proc/${pid}/fd/${fd}`)
      if (target.startsWith("socket:[")) inodes.add(target.slice(8, -1))
    } catch {
      // The fd closed while we read the directory.
    }
  }
  const out: ListeningSocket[] = []
  for (const table of ["tcp", "tcp6"]) {
    let text: string
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, "utf8")
    } catch {
      continue
    }
    for (const row of text.split("\n").slice(1)) {
      const f = row.trim().split(/\s+/)
      if (f.length < 10 || f[3] !== LISTEN || !inodes.has(f[9]!)) continue
      const [addr, port] = f[1]!.split(":")
      out.push({ address: decodeAddress(addr!), port: parseInt(port!, 16) })
    }
  }
  return out
}

export const isLoopback = (address: string): boolean =>
  address.startsWith("127.") || address === "::1" || address.startsWith("::ffff:127.")
