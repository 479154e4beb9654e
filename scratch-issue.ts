import { Result } from "effect"
import { Core } from "./src/controller/core.ts"
import { RemoteStream } from "./src/controller/handles.ts"
import type { WorkerLink } from "./src/controller/listener.ts"
import { createMesh } from "./src/controller/mesh.ts"
import { opsOn } from "./src/controller/ops.ts"
import { NDSlice } from "./src/protocol/ndslice.ts"
import { CallSite } from "./src/controller/sites.ts"
import { encodeMessageParts } from "./src/protocol/codec.ts"

const world = Number(process.argv[2] ?? 1)
const sites = process.argv[3] !== "nosites"
const core = new Core({ world, captureSites: sites, gcRelease: true })
let bytes = 0
for (let rank = 0; rank < world; rank++) {
  const link: WorkerLink = {
    hello: { _tag: "WorkerHello", rank, world, pid: 1000 + rank, token: "t", device: "cpu" },
    host: "x", send: () => true, sendEncoded: (parts) => { for (const p of parts) bytes += p.byteLength; return true },
    sendRawForTestsOnly: () => {}, close: () => {},
  }
  core.admit(link)
}
const mesh = createMesh(core, ["all"], NDSlice.contiguous([world]), new RemoteStream(core, core.newRef()))
const on = opsOn(mesh)
core.flush()
const N = 20000
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6 }
const time = (name: string, f: () => void) => {
  const rs: number[] = []
  for (let r = 0; r < 7; r++) {
    const c0 = cpu(); f(); rs.push((cpu() - c0) / N * 1e6)
  }
  rs.sort((a, b) => a - b)
  console.log(`${name.padEnd(40)} min ${rs[0]!.toFixed(3)} med ${rs[3]!.toFixed(3)} us/op`)
}
const catchUp = () => { core.flush(); for (let r = 0; r < world; r++) core.onMessage(r, { _tag: "Status", firstUncompletedIdent: 1e12 }) }
let x = on.ones([1])
catchUp()
time("typed x.add_(1): issue only", () => { for (let i = 0; i < N; i++) x.add_(1); (core as any).outbox.forEach((q: any[], i: number) => ((core as any).outbox[i] = [])); core.graph.live.clear() })
time("typed x.add_(1): issue+flush+settle", () => { for (let i = 0; i < N; i++) x.add_(1); catchUp() })
time("typed y=x.add(1): issue+flush+settle", () => { for (let i = 0; i < N; i++) x.add(1); catchUp() })
time("typed y=x.add(1) release: i+f+s", () => { for (let i = 0; i < N; i++) x.add(1).release(); catchUp() })
time("CallSite.capture(6)", () => { for (let i = 0; i < N; i++) CallSite.capture(6) })
time("flush only (encode)", () => { for (let i = 0; i < N; i++) x.add_(1); const c0 = cpu(); core.flush(); const d = cpu() - c0; for (let r = 0; r < world; r++) core.onMessage(r, { _tag: "Status", firstUncompletedIdent: 1e12 }); console.log("   flush part", (d / N * 1e6).toFixed(3)) })
time("settle only", () => { for (let i = 0; i < N; i++) x.add_(1); core.flush(); const c0 = cpu(); for (let r = 0; r < world; r++) core.onMessage(r, { _tag: "Status", firstUncompletedIdent: 1e12 }); console.log("   settle part", ((cpu() - c0) / N * 1e6).toFixed(3)) })
console.log("bytes/op", bytes / (N * 7 * 6))
