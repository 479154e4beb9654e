import { encodeMessageParts, encodeMessage } from "./src/protocol/codec.ts"
import { Ref } from "./src/protocol/values.ts"
import { Encoder } from "@msgpack/msgpack"
const N = 20000
const cmds = Array.from({ length: N }, (_, i) => ({ _tag: "CallFunction", ident: i, results: [], mutates: [new Ref(5)], function: "ops.add_", args: [new Ref(5), 1], kwargs: {}, stream: new Ref(1) }))
const g = { _tag: "CommandGroup", commands: cmds } as any
const cpu = () => performance.now()
for (let r = 0; r < 30; r++) {
  const t0 = cpu(); encodeMessageParts(g); const t1 = cpu()
  const plain = cmds.map((c) => [1, c.ident, c.results, c.mutates.map(m=>m.id), c.function, [5, 1], c.kwargs, 1])
  const e = new Encoder(); const t2 = cpu(); e.encode([4, plain]); const t3 = cpu()
  console.log("full", ((t1 - t0) / N * 1000).toFixed(3), "plain msgpack no ext", ((t3 - t2) / N * 1000).toFixed(3))
}
