import { Core } from "./src/controller/core.ts"
import { RemoteStream } from "./src/controller/handles.ts"
import type { WorkerLink } from "./src/controller/listener.ts"
import { createMesh } from "./src/controller/mesh.ts"
import { opsOn } from "./src/controller/ops.ts"
import { NDSlice } from "./src/protocol/ndslice.ts"
const world = Number(process.argv[2] ?? 1)
const fresh = process.argv[3] === "fresh"
const core = new Core({ world })
for (let rank = 0; rank < world; rank++) core.admit({ hello: { _tag: "WorkerHello", rank, world, pid: 1000 + rank, token: "t", device: "cpu" }, host: "x", send: () => true, sendEncoded: () => true, sendRawForTestsOnly: () => {}, close: () => {} } as WorkerLink)
const mesh = createMesh(core, ["all"], NDSlice.contiguous([world]), new RemoteStream(core, core.newRef()))
const on = opsOn(mesh)
const x = on.ones([1])
const N = 20000
const t0 = performance.now()
for (let r = 0; r < 100; r++) {
  for (let i = 0; i < N; i++) fresh ? x.add(1) : x.add_(1)
  core.flush()
  for (let k = 0; k < world; k++) core.onMessage(k, { _tag: "Status", firstUncompletedIdent: 1e12 })
  await new Promise((r) => setTimeout(r, 0))
}
console.log(((performance.now() - t0) / N / 100 * 1000).toFixed(3), "us/op wall")
