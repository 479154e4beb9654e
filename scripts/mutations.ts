/**
 * The deliberate breaks scripts/mutate.ts applies, one at a time: each names the behaviour it
 * breaks, the exact text it replaces (found by searching the source tree, so a file may move;
 * an edit whose text is not found exactly once is reported as stale), and the test files that
 * should notice. `file` is where the text was when the entry was written, shown when it moved.
 */

export interface Edit {
  readonly search: string
  readonly replace: string
}

export interface Mutation {
  readonly area: "worker" | "controller" | "protocol" | "autograd"
  /** The behaviour the break removes, as a test failing on it should say. */
  readonly behaviour: string
  readonly file: string
  readonly edits: ReadonlyArray<Edit>
  readonly tests: ReadonlyArray<string>
}

const one = (search: string, replace: string): ReadonlyArray<Edit> => [{ search, replace }]

export const MUTATIONS: ReadonlyArray<Mutation> = [
  // ---- worker -----------------------------------------------------------------------------
  {
    area: "worker", behaviour: "a command that fails synchronously still advances firstUncompletedIdent",
    file: "src/worker/session.ts",
    edits: one("    complete()\n    return poison(s, ident, refs, e)", "    return poison(s, ident, refs, e)"),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/lifecycle.test.ts"],
  },
  {
    area: "worker", behaviour: "Status is not re-sent when nothing advanced",
    file: "src/worker/session.ts",
    edits: one("    s.lastSentStatus = s.firstUncompletedIdent\n", ""),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/lifecycle.test.ts"],
  },
  {
    area: "worker", behaviour: "Status is not sent before anything completed",
    file: "src/worker/session.ts",
    edits: one("if (s.firstUncompletedIdent > s.lastSentStatus) {", "if (s.firstUncompletedIdent >= s.lastSentStatus) {"),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/lifecycle.test.ts"],
  },
  {
    area: "worker", behaviour: "a rank with a poisoned input joins the collective with zeros",
    file: "src/worker/handlers/collectives.ts",
    edits: one(
      "        return { input, out: collective(s, comm, input.tensor, m, stream) }\n",
      "        if (input.failure !== undefined) throw input.failure\n        return { input, out: collective(s, comm, input.tensor, m, stream) }\n",
    ),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/errors.test.ts"],
  },
  {
    area: "worker", behaviour: "a send to oneself is a copy and posts no receive",
    file: "src/worker/handlers/collectives.ts",
    edits: one('...(received && from !== s.rank ? [{ kind: "recv"', '...(received ? [{ kind: "recv"'),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/collectives.test.ts"],
  },
  {
    area: "worker", behaviour: "a function returning more tensors than declared fails (ResultCountMismatch)",
    file: "src/worker/handlers/calls.ts",
    edits: [
      { search: "if (tensors.length !== m.results.length) {", replace: "if (tensors.length < m.results.length) {" },
      { search: "for (let i = 0; i < tensors.length; i++) s.env.define(m.results[i]!, tensors[i]!)", replace: "for (let i = 0; i < m.results.length; i++) s.env.define(m.results[i]!, tensors[i]!)" },
    ],
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/commands.test.ts"],
  },
  {
    area: "worker", behaviour: "a restartable Exit starts a fresh state",
    file: "src/worker/loop.ts",
    edits: one(
      '          closeSession(session)\n          if (!options.restartable) return "exit"\n          session = fresh()\n          dispatch = makeDispatch(session, debug, options.trace)\n',
      '          if (!options.restartable) {\n            closeSession(session)\n            return "exit"\n          }\n          session.exiting = false\n',
    ),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/lifecycle.test.ts"],
  },
  {
    area: "worker", behaviour: "a failure that depends on a poisoned input is not reported again",
    file: "src/worker/session.ts",
    edits: one("  if (error instanceof DependentOnError) {\n    for (const r of refs) s.env.define(r, error)\n    return Effect.void\n  }\n", ""),
    tests: ["tests/worker/errors.test.ts"],
  },
  {
    area: "worker", behaviour: "looking up a poisoned ref fails with its poison",
    file: "src/worker/refs.ts",
    edits: one("    if (v instanceof DependentOnError) throw v\n", ""),
    tests: ["tests/worker/errors.test.ts"],
  },
  {
    area: "worker", behaviour: "RequestStatus moves firstUncompletedIdent past its ident",
    file: "src/worker/handlers/control.ts",
    edits: one("  s.firstUncompletedIdent = Math.max(s.firstUncompletedIdent, m.ident + 1)\n", ""),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/commands.test.ts"],
  },
  {
    area: "worker", behaviour: "a CommandGroup runs its commands in order",
    file: "src/worker/handlers/control.ts",
    edits: one("    for (const command of m.commands) {", "    for (const command of [...m.commands].reverse()) {"),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/commands.test.ts"],
  },
  {
    area: "worker", behaviour: "DeleteRefs forgets the refs",
    file: "src/worker/handlers/control.ts",
    edits: one("const unknown = m.refs.filter((id) => !s.env.delete(id))", "const unknown = m.refs.filter((id) => !s.env.has(id))"),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/commands.test.ts"],
  },
  {
    area: "worker", behaviour: "a value under several refs lives until its last ref goes",
    file: "src/worker/refs.ts",
    edits: one("    if (n > 0) return void this.holds.set(value, n)\n", ""),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/borrows.test.ts", "tests/worker/resources.test.ts"],
  },
  {
    area: "worker", behaviour: "a mesh dim's group is the ranks along that dim",
    file: "src/worker/mesh.ts",
    edits: one("Array.from({ length: size }, (_, c) => r + c * stride)", "Array.from({ length: size }, (_, c) => r + c)"),
    tests: ["tests/worker/inProcess.test.ts", "tests/worker/collectives.test.ts"],
  },
  {
    area: "worker", behaviour: "a poisoned send input poisons only a copy to oneself, not what came from a peer",
    file: "src/worker/handlers/collectives.ts",
    edits: one("if (failure !== undefined && (from === s.rank || !(failure instanceof DependentOnError))) {", "if (failure !== undefined) {"),
    tests: ["tests/worker/collectives.test.ts"],
  },
  {
    area: "worker", behaviour: "FetchValue applies its function to the value",
    file: "src/worker/handlers/calls.ts",
    edits: one("      if (m.function === null) return reply(value)\n", "      return reply(value)\n"),
    tests: ["tests/worker/commands.test.ts"],
  },
  {
    area: "worker", behaviour: "a frame that does not decode is answered with a ProtocolError",
    file: "src/worker/link.ts",
    edits: one('                  conn?.send({ _tag: "ProtocolError", message: e.message })\n', ""),
    tests: ["tests/worker/lifecycle.test.ts"],
  },
  {
    area: "worker", behaviour: "a prepared replay runs the usual way when an input has another dtype of the same shape",
    file: "src/worker/prepared.ts",
    edits: one("v.dtype !== p.dtypes[i] || ", ""),
    tests: ["tests/recordings/worker.test.ts"],
  },

  {
    area: "worker", behaviour: "an ident past MAX_IDENT is refused, so every Status stays sendable",
    file: "src/protocol/fields.ts",
    edits: one("  if (n > MAX_IDENT) throw new Invalid(where,", "  if (false) throw new Invalid(where,"),
    tests: ["tests/worker/idents.test.ts"],
  },
  {
    area: "worker", behaviour: "a CallRecording whose idents end past 2^53 - 1 is refused",
    file: "src/worker/handlers/recordings.ts",
    edits: one("if (m.ident + define.idents > Number.MAX_SAFE_INTEGER)", "if (false)"),
    tests: ["tests/worker/idents.test.ts"],
  },
  {
    area: "worker", behaviour: "a worker refuses a DefineRecording past MONARCH_MAX_RECORDINGS",
    file: "src/worker/handlers/recordings.ts",
    edits: one("if (replaced === undefined && s.recordings.size >= recordings)", "if (false)"),
    tests: ["tests/worker/recordingLimits.test.ts"],
  },
  {
    area: "worker", behaviour: "a worker refuses a DefineRecording past MONARCH_MAX_RECORDED_COMMANDS",
    file: "src/worker/handlers/recordings.ts",
    edits: one("  if (held > commands)\n", "  if (false)\n"),
    tests: ["tests/worker/recordingLimits.test.ts"],
  },
  {
    area: "worker", behaviour: "a view of a view counts the memory's owner, not the intermediate view",
    file: "ffi/tensor.ts",
    edits: one("const base = this.#base ?? this", "const base = this"),
    tests: ["tests/ops/views.test.ts"],
  },
  // ---- controller -------------------------------------------------------------------------
  {
    area: "controller", behaviour: "a lost worker fails only the commands that need it (graph)",
    file: "src/controller/graph.ts",
    edits: one(
      "    for (const node of waited) {\n      node.waiting--\n      this.fail(node, failure(node), rank)\n",
      "    for (const node of [...this.live.values()]) {\n      if (waited.includes(node)) node.waiting--\n      this.fail(node, failure(node), rank)\n",
    ),
    tests: ["tests/faults/loss.test.ts", "tests/controller/supervision.test.ts"],
  },
  {
    area: "controller", behaviour: "a lost worker fails only the fetches that need it (every pending fetch failed)",
    file: "src/controller/core.ts",
    edits: one(
      "    for (const ident of [...this.fetches.keys()]) this.tryFinish(ident)\n",
      "    for (const [ident, p] of this.fetches) if (!p.answered) { p.answered = true; p.resume(Effect.fail(new WorkerLost({ rank, status: exit?.status, signal: undefined, ident }))) }\n",
    ),
    tests: ["tests/faults/loss.test.ts", "tests/controller/supervision.test.ts"],
  },
  {
    area: "controller", behaviour: "a root failure poisons everything downstream of it",
    file: "src/controller/graph.ts",
    edits: one("      n.tainted = true\n      stack.push(...n.dependents)\n", "      n.tainted = true\n"),
    tests: ["tests/controller/controller.test.ts"],
  },
  {
    area: "controller", behaviour: "a command settles only once every rank has passed it",
    file: "src/controller/graph.ts",
    edits: one("      if (node.ident >= firstUncompleted) break\n", "      if (node.ident > firstUncompleted) break\n"),
    tests: ["tests/controller/controller.test.ts", "tests/faults/loss.test.ts"],
  },
  {
    area: "controller", behaviour: "a collective's result on a rank depends on every member of its group",
    file: "src/controller/graph.ts",
    edits: one("    if (node.exchange) for (const p of node.exchange.peers(rank)) if (node.members.has(p)) push(node, p)\n", ""),
    tests: ["tests/faults/loss.test.ts"],
  },
  {
    area: "controller", behaviour: "a fetch waits only for the ranks its value depends on",
    file: "src/controller/graph.ts",
    edits: one("      if (this.waitsOn(n, r) && (needs.get(r) ?? -1) < n.ident) needs.set(r, n.ident)\n", "      for (const w of n.ranks) if (this.waitsOn(n, w) && (needs.get(w) ?? -1) < n.ident) needs.set(w, n.ident)\n"),
    tests: ["tests/faults/loss.test.ts"],
  },
  {
    area: "controller", behaviour: "one encoding is shared only by ranks with the same commands",
    file: "src/controller/core.ts",
    edits: one("if (!previous || !sameMessages(queue, previous.queue)) {", "if (!previous) {"),
    tests: ["tests/controller/controller.test.ts"],
  },
  {
    area: "controller", behaviour: "a peer's CommError gives way to the loss that explains it",
    file: "src/controller/graph.ts",
    edits: one('case "RemoteError": return mayBePeerLoss(f.type, f.kind) ? 3 : 0', 'case "RemoteError": return 0'),
    tests: ["tests/faults/loss.test.ts"],
  },
  {
    area: "controller", behaviour: "the controller admits only a WorkerHello whose proof holds for the job token",
    file: "src/controller/listener.ts",
    edits: one('if (!proves(msg.proof, o.token, "worker", t)) return refuse(', 'if (false) return refuse('),
    tests: ["tests/security/token.test.ts", "tests/security/closedDoor.test.ts", "tests/security/impostor.test.ts"],
  },
  {
    area: "controller", behaviour: "the controller refuses a WorkerHello for another rank than its challenge's",
    file: "src/controller/listener.ts",
    edits: one("if (msg.rank !== t.rank || msg.world !== t.world) return refuse(", "if (false) return refuse("),
    tests: ["tests/security/closedDoor.test.ts"],
  },
  {
    area: "worker", behaviour: "the worker checks the controller's proof before it sends its WorkerHello",
    file: "src/worker/link.ts",
    edits: one('if (!proves(m.proof, o.token, "controller", transcript)) return unproven(', "if (false) return unproven("),
    tests: ["tests/security/impostor.test.ts", "tests/security/token.test.ts"],
  },
  {
    area: "worker", behaviour: "a worker that met an impostor reads the controller's address again",
    file: "src/worker/startup.ts",
    edits: one("          ControllerUnproven: (e) => Effect.succeed(e),\n", ""),
    tests: ["tests/security/impostor.test.ts"],
  },
  {
    area: "protocol", behaviour: "the handshake's proofs name the connection's channel, so a relay fails",
    file: "src/net/handshake.ts",
    edits: one("t.rank, t.world, t.channel, t.workerNonce", "t.rank, t.world, t.workerNonce"),
    tests: ["tests/security/impostor.test.ts", "tests/security/handshake.test.ts"],
  },
  {
    area: "protocol", behaviour: "the handshake's proofs name their role, so a proof cannot be reflected",
    file: "src/net/handshake.ts",
    edits: one("encode([LABEL, role, t.rank", "encode([LABEL, t.rank"),
    tests: ["tests/security/impostor.test.ts", "tests/security/handshake.test.ts"],
  },
  {
    area: "protocol", behaviour: "the handshake's proofs cover the controller's nonce, so a proof cannot be replayed",
    file: "src/net/handshake.ts",
    edits: one("t.workerNonce, t.controllerNonce])", "t.workerNonce])"),
    tests: ["tests/security/handshake.test.ts"],
  },
  {
    area: "controller", behaviour: "a rank already connected is not admitted again",
    file: "src/controller/core.ts",
    edits: one("rank >= this.world || this.links[rank]) return false", "rank >= this.world) return false"),
    tests: ["tests/security/closedDoor.test.ts"],
  },
  {
    area: "controller", behaviour: "a fetch asks every rank for Status, so it settles without the 1 s wait",
    file: "src/controller/core.ts",
    edits: one("      // for the once-a-second Status.\n      this.statusWanted = true\n", "      // for the once-a-second Status.\n"),
    tests: ["tests/controller/core.test.ts", "tests/controller/controller.test.ts"],
  },
  {
    area: "controller", behaviour: "a command outstanding past hangAfterMs is reported",
    file: "src/controller/core.ts",
    edits: one("      if (waitingMs < after) break\n", "      if (waitingMs < 2 * after) break\n"),
    tests: ["tests/controller/controller.test.ts"],
  },
  {
    area: "controller", behaviour: "a sharded fromHost sends each rank only its own block of the host batch",
    file: "src/controller/ops.ts",
    edits: one("    return [hostBlock(host, index.map((b, k) => b * sizes[k]!), sizes)]\n", "    return [hostBlock(host, index.map((b, k) => b * sizes[k]!), sizes), host]\n"),
    tests: ["tests/controller/fromhost.test.ts"],
  },
  {
    area: "controller", behaviour: "a sharded fromHost gives each rank the block its coordinates name",
    file: "src/controller/ops.ts",
    edits: one("index[s.dim] = index[s.dim]! * mesh.layout.sizes[s.meshDim]! + coords[s.meshDim]!", "index[s.dim] = index[s.dim]! * mesh.layout.sizes[s.meshDim]!"),
    tests: ["tests/controller/fromhost.test.ts"],
  },
  {
    area: "controller", behaviour: "a sharded fromHost copies a block of an inner dim row by row (its strides)",
    file: "src/controller/ops.ts",
    edits: one("    for (let d = 0; d < split; d++) from += (starts[d]! + index[d]!) * strides[d]!\n", "    for (let d = 0; d < split; d++) from += (starts[d]! + index[d]!) * strides[split]!\n"),
    tests: ["tests/controller/fromhost.test.ts"],
  },
  {
    area: "controller", behaviour: "fromHost refuses a host dim that does not split evenly over its shards",
    file: "src/controller/ops.ts",
    edits: one("    if (size % parts[k]! !== 0) throw refuse(", "    if (size % parts[k]! !== 0 && false) throw refuse("),
    tests: ["tests/controller/fromhost.test.ts"],
  },
  {
    area: "controller", behaviour: "a per-rank upload (sharded fromHost) is refused while compile records",
    file: "src/controller/core.ts",
    edits: one("    if (this.tracing) throw new ControllerError({ message: `${label} with per-rank arguments", "    if (this.tracing && false) throw new ControllerError({ message: `${label} with per-rank arguments"),
    tests: ["tests/controller/fromhost.test.ts"],
  },
  // compile (src/controller/recording.ts): behaviours say "compile:" (--only compile:)
  {
    area: "controller", behaviour: "compile: every number is part of the signature (a new value traces again)",
    file: "src/controller/recording.ts",
    edits: one("return leaf(path, `n${numberText(v)}`, v)", 'return leaf(path, "n", v)'),
    tests: ["tests/recordings/numbers.test.ts", "tests/recordings/reliability.test.ts"],
  },
  {
    area: "controller", behaviour: "compile: what a step reads of an object argument is part of the signature",
    file: "src/controller/recording.ts",
    edits: one("cache.get(flat.key)?.find((r) => unlikeRead(r, flat) === undefined)", "cache.get(flat.key)?.[0]"),
    tests: ["tests/recordings/numbers.test.ts", "tests/recordings/reliability.test.ts"],
  },
  {
    area: "controller", behaviour: "compile: a replay parameter's kind (an integer or a fraction) is part of the signature",
    file: "src/controller/recording.ts",
    edits: one("return leaf(path, `p${paramKind(v.value)}`, v)", 'return leaf(path, "p", v)'),
    tests: ["tests/recordings/numbers.test.ts", "tests/recordings/recordings.test.ts"],
  },
  {
    area: "controller", behaviour: "compile: a replay parameter whose other value changes the commands is refused, naming it",
    file: "src/controller/recording.ts",
    edits: one("  if (d.structural !== undefined) return { why: `it changes the commands or the tensors (${d.structural})` }\n", ""),
    tests: ["tests/recordings/recordings.test.ts"],
  },
  {
    area: "controller", behaviour: "compile: a replay parameter that reaches an op through arithmetic is refused, naming it",
    file: "src/controller/recording.ts",
    edits: one("    if (i < 0) return { why: `it reaches", "    if (i < 0) continue\n    if (i < 0) return { why: `it reaches"),
    tests: ["tests/recordings/recordings.test.ts"],
  },
  {
    area: "controller", behaviour: "compile: one tensor in two argument places is part of the signature",
    file: "src/controller/recording.ts",
    edits: one("return leaf(path, same >= 0 ? `=${same}` : `${v.meta", "return leaf(path, `${v.meta"),
    tests: ["tests/recordings/recordings.test.ts"],
  },
  {
    area: "controller", behaviour: "compile: a replay's handles carry the placement of the trace's (a reduce_scatter's shard(0))",
    file: "src/controller/recording.ts",
    edits: one("    samePlacement(t, made)\n", ""),
    tests: ["tests/recordings/placements.test.ts", "tests/recordings/reliability.test.ts"],
  },
  {
    area: "controller", behaviour: "compile: a call after a tensor the step captured was released is refused, naming it",
    file: "src/controller/recording.ts",
    edits: one("const gone = recording.captured.find((c) => c.tensor.released)", "const gone = recording.captured.find(() => false)"),
    tests: ["tests/recordings/numbers.test.ts"],
  },
  {
    area: "controller", behaviour: "compile: a first call traces the step twice, not once more per number",
    file: "src/controller/recording.ts",
    edits: one("    const again = yield* attempt(probes)\n", "    for (let i = 0; i < flat.leaves.length; i++) yield* attempt(probes)\n    const again = yield* attempt(probes)\n"),
    tests: ["tests/recordings/numbers.test.ts"],
  },
  {
    area: "controller", behaviour: "optimizer state (AdamW moments, SGD momentum buffers) outlives the step scope that made it",
    file: "src/optim/optimizer.ts",
    edits: one("    escape(buffer)\n", ""),
    tests: ["tests/optim/optim.test.ts"],
  },
  {
    area: "controller", behaviour: "loadStateDict restores each parameter's buffers (moments, momentum) from the state",
    file: "src/optim/optimizer.ts",
    edits: one("          s[field] = copy\n", ""),
    tests: ["tests/optim/statedict.test.ts"],
  },
  {
    area: "controller", behaviour: "loadStateDict restores each parameter's step count",
    file: "src/optim/optimizer.ts",
    edits: one("const s: Record<string, unknown> = { step: entry.step }", "const s: Record<string, unknown> = { step: 0 }"),
    tests: ["tests/optim/statedict.test.ts"],
  },
  {
    area: "controller", behaviour: "loadStateDict refuses a released buffer before changing anything",
    file: "src/optim/optimizer.ts",
    edits: one("        if (t.released) throw refuse(", "        if (false) throw refuse("),
    tests: ["tests/optim/statedict.test.ts"],
  },
  {
    area: "controller", behaviour: "loadStateDict restores each group's options",
    file: "src/optim/optimizer.ts",
    edits: one("      this.paramGroups.forEach((g, i) => (g.options = options[i]!))\n", ""),
    tests: ["tests/optim/statedict.test.ts"],
  },
  {
    area: "controller", behaviour: "console.log of a RemoteTensor prints its size, dtype, mesh and placement, not its internals",
    file: "src/controller/printing.ts",
    edits: one('Object.defineProperty(RemoteTensor.prototype, Symbol.for("nodejs.util.inspect.custom"), {', 'Object.defineProperty(RemoteTensor.prototype, Symbol.for("not.inspect"), {'),
    tests: ["tests/controller/printing.test.ts"],
  },
  {
    area: "controller", behaviour: "a sharded RemoteTensor prints its logical size and its local one",
    file: "src/controller/printing.ts",
    edits: one("blockOf(p, t.mesh, t.mesh.ranks[0]!, local).shape", "local"),
    tests: ["tests/controller/printing.test.ts"],
  },
  {
    area: "protocol", behaviour: "a HostTensor prints its values as torch does, not its bytes",
    file: "src/protocol/values.ts",
    edits: one('  [Symbol.for("nodejs.util.inspect.custom")](): string {\n    return this.toString()', '  [Symbol.for("not.inspect")](): string {\n    return this.toString()'),
    tests: ["tests/protocol/print.test.ts"],
  },
  {
    area: "protocol", behaviour: "a printed HostTensor rounds an exact tie to the even digit, as Python's format",
    file: "src/protocol/print.ts",
    edits: one("Number(kept.at(-1)) % 2 !== 0", "true"),
    tests: ["tests/protocol/print.test.ts"],
  },
  {
    area: "protocol", behaviour: "a printed HostTensor past 1000 elements is abbreviated to 3 items each side of every dim",
    file: "src/protocol/print.ts",
    edits: one("numel > THRESHOLD", "numel > 10 * THRESHOLD"),
    tests: ["tests/protocol/print.test.ts"],
  },
  {
    area: "protocol", behaviour: "a printed HostTensor's dtype goes on a line of its own past 80 characters, as torch's",
    file: "src/protocol/print.ts",
    edits: one("if (lastLine + suffix.length + 2 > LINE_WIDTH) {", "if (false) {"),
    tests: ["tests/protocol/print.test.ts"],
  },
  {
    area: "protocol", behaviour: "a printed HostTensor of floats uses scientific notation when they span more than 1000x",
    file: "src/protocol/print.ts",
    edits: one("if (max / min > 1000 || max > 1e8", "if (max > 1e8"),
    tests: ["tests/protocol/print.test.ts"],
  },
  {
    area: "controller", behaviour: "fromHost uploads a host tensor's values to every rank",
    file: "src/controller/ops.ts",
    edits: one('invoke("clone", mesh, [host])', 'invoke("zeros_like", mesh, [host])'),
    tests: ["tests/controller/fromhost.test.ts"],
  },
  {
    area: "worker", behaviour: "SGD with maximize negates the gradient before adding the weight decay, as torch.optim",
    file: "ffi/ops.ts",
    edits: one('a.dampening, a.weightDecay, flags, stream(s)), "shim_sgd")', 'a.dampening, a.maximize ? -a.weightDecay : a.weightDecay, flags, stream(s)), "shim_sgd")'),
    tests: ["tests/optim/optim.test.ts"],
  },

  {
    area: "controller", behaviour: "the controller deletes the recordings called least recently before a worker's bound",
    file: "src/controller/recordingBudget.ts",
    edits: one("while (this.held.size >= this.limits.recordings || this.commands + commands > this.limits.commands) {", "while (false) {"),
    tests: ["tests/recordings/budget.test.ts"],
  },
  {
    area: "controller", behaviour: "a call marks its recording as used, so the one called least recently goes first",
    file: "src/controller/recording.ts",
    edits: one("  core.recordings.touch(recording.id)\n", ""),
    tests: ["tests/recordings/budget.test.ts"],
  },

  {
    area: "controller", behaviour: "an in-place op whose input partly overlaps what it writes is refused at the call (reason overlap)",
    file: "src/controller/storage.ts",
    edits: one('if (lap === "partial" || (lap === "full" && strict)) throw', 'if (lap === "full" && strict) throw'),
    tests: ["tests/autograd/inplace.test.ts", "tests/ops/views.test.ts"],
  },
  {
    area: "controller", behaviour: "the same elements in another layout overlap partly (torch's rule: the strides differ)",
    file: "src/controller/storage.ts",
    edits: one('return stridesOf(a.meta.shape).join() === stridesOf(b.meta.shape).join() ? "full" : "partial"', 'return "full"'),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "controller", behaviour: "index_add_ and scatter_ refuse an input that is the same elements as what they write",
    file: "src/controller/storage.ts",
    edits: one("const strict = NO_OVERLAP.has(op)", "const strict = false"),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "controller", behaviour: "a block view (narrow, select, split) shares its input's memory on the controller",
    file: "src/controller/ops.ts",
    edits: one("if (starts[i] !== undefined) r.viewOf(input, starts[i]!)", "if (starts[i] === -1) r.viewOf(input, starts[i]!)"),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "controller", behaviour: "shard(d) with a negative d is refused",
    file: "src/controller/placement.ts",
    edits: one("d.dim < 0 || ", ""),
    tests: ["tests/gpt/placement.test.ts"],
  },
  {
    area: "controller", behaviour: "shard(d) past the tensor's last dim is refused",
    file: "src/controller/placement.ts",
    edits: one("(ndim !== undefined && d.dim >= ndim)", "(ndim !== undefined && d.dim > ndim)"),
    tests: ["tests/gpt/placement.test.ts"],
  },
  {
    area: "controller", behaviour: "a fractional or NaN shard dim is refused",
    file: "src/controller/placement.ts",
    edits: one("!Number.isInteger(d.dim) || ", ""),
    tests: ["tests/gpt/placement.test.ts"],
  },
  // ---- protocol ---------------------------------------------------------------------------
  {
    area: "protocol", behaviour: "NDSlice.rankAt walks row-major",
    file: "src/protocol/ndslice.ts",
    edits: one("      index = Math.floor(index / size)\n", "      index = Math.ceil(index / size)\n"),
    tests: ["tests/protocol/ndslice.test.ts"],
  },
  {
    area: "protocol", behaviour: "NDSlice.members walks the dim through the rank",
    file: "src/protocol/ndslice.ts",
    edits: one("start = rank - stride * coords[dim]!", "start = rank"),
    tests: ["tests/protocol/ndslice.test.ts"],
  },
  {
    area: "protocol", behaviour: "an NDSlice stride must be a non-negative safe integer",
    file: "src/protocol/ndslice.ts",
    edits: one("      if (!natural(stride)) return `stride ${stride} of dim ${d} is not a non-negative safe integer`\n", ""),
    tests: ["tests/protocol/ndslice.test.ts", "tests/protocol/malformed.test.ts"],
  },
  {
    area: "protocol", behaviour: "a length prefix over the maximum frame size is refused",
    file: "src/protocol/framing.ts",
    edits: one("        if (length > this.maxFrameBytes) {", "        if (length > 2 * this.maxFrameBytes) {"),
    tests: ["tests/protocol/framing.test.ts"],
  },
  {
    area: "protocol", behaviour: "SendTensor's fromRanks and toRanks must be the same length",
    file: "src/protocol/messages.ts",
    edits: one("(m) => (m.fromRanks.length !== m.toRanks.length ?", "(m) => (false ?"),
    tests: ["tests/protocol/malformed.test.ts", "tests/protocol/codec.test.ts"],
  },
  {
    area: "protocol", behaviour: "a value nesting arrays deeper than MAX_DEPTH is refused",
    file: "src/protocol/validate.ts",
    edits: one("      if (Array.isArray(v)) {\n        if (depth > MAX_DEPTH) return new ValueFailure(`nesting deeper than ${MAX_DEPTH}`)\n", "      if (Array.isArray(v)) {\n"),
    tests: ["tests/protocol/malformed.test.ts", "tests/protocol/codec.test.ts"],
  },
  {
    area: "protocol", behaviour: "a message for the other direction is refused",
    file: "src/protocol/codec.ts",
    edits: one("  if (e.direction !== direction) throw new Invalid(", "  if (false) throw new Invalid("),
    tests: ["tests/protocol/malformed.test.ts", "tests/protocol/codec.test.ts"],
  },
  {
    area: "protocol", behaviour: "a u32 in an ext payload is read little-endian in full",
    file: "src/protocol/codec.ts",
    edits: one("+ b[at + 3]! * 0x100_0000", "+ b[at + 3]! * 0x10_0000"),
    tests: ["tests/protocol/codec.test.ts"],
  },
  {
    area: "protocol", behaviour: "the store checks a MULTI_GET reply's size against its bound before building it",
    file: "src/store/server.ts",
    edits: one("new Writer(replyRoom(values.reduce((n, v) => n + v.byteLength + 8, 0)))", "new Writer(values.reduce((n, v) => n + v.byteLength + 8, 0))"),
    tests: ["tests/security/preAuth.test.ts"],
  },
  // ---- ops of issue 11.2 (behaviours say "11.2": --only 11.2) -----------------------------
  {
    area: "worker", behaviour: "11.2: each rank draws its own stream unless asked for a shared one",
    file: "src/ops/generator.ts",
    edits: one("distinct ? BigInt(this.rank) : -1n & U64", "-1n & U64"),
    tests: ["tests/ops/random.test.ts"],
  },
  {
    area: "worker", behaviour: "11.2: a draw advances the generator",
    file: "src/ops/generator.ts",
    edits: one("    this.offset = (this.offset + BigInt(n)) & U64\n", ""),
    tests: ["tests/ops/random.test.ts"],
  },
  {
    area: "worker", behaviour: "11.2: set_rng_state restores the generator",
    file: "src/ops/kernels.ts",
    edits: one("    run.ctx.generator.setState(key!, offset!)\n", ""),
    tests: ["tests/ops/random.test.ts"],
  },
  {
    area: "worker", behaviour: "11.2: scaled_dot_product_attention honours is_causal",
    file: "src/ops/kernels.ts",
    edits: one("a.scale ?? 1 / Math.sqrt(p.e), a.is_causal, run.stream", "a.scale ?? 1 / Math.sqrt(p.e), false, run.stream"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "11.2: split's pieces follow each other along the dim",
    file: "src/ops/kernels.ts",
    edits: one("{ start: (at += m.shape[d]!) - m.shape[d]!, length: m.shape[d]! }", "{ start: 0, length: m.shape[d]! }"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "11.2: nll_loss leaves out ignore_index targets",
    file: "src/ops/kernels.ts",
    edits: one("k.nllLoss(out!, a.input, a.target, a.weight, a.ignore_index,", "k.nllLoss(out!, a.input, a.target, a.weight, -12345,"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "11.2: rms_norm's default eps is the dtype's epsilon",
    file: "src/ops/kernels.ts",
    edits: one("a.eps ?? EPSILON[a.input.dtype]!", "a.eps ?? 1e-5"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "controller", behaviour: "11.2: split and chunk give every piece on the typed surface",
    file: "src/controller/ops.ts",
    edits: one("    case \"tensors\": return results\n", "    case \"tensors\": return results.slice(0, 1)\n"),
    tests: ["tests/ops/typed.test.ts"],
  },
  {
    area: "autograd", behaviour: "11.2: scaled_dot_product_attention's gradient takes the softmax's row sums out",
    file: "src/ops/specs/nn.ts",
    edits: one("return o.mul(p, o.sub(dp, o.sum(o.mul(dp, p), -1, true)))", "return o.mul(p, dp)"),
    tests: ["tests/autograd/gradcheck.test.ts"],
  },
  {
    area: "autograd", behaviour: "11.2: a split piece's gradient goes back to its own place",
    file: "src/ops/specs/layout.ts",
    edits: one("start = sizes.slice(0, at).reduce((a, b) => a + b, 0)", "start = 0"),
    tests: ["tests/autograd/gradcheck.test.ts"],
  },
  // ---- checkpoints ------------------------------------------------------------------------
  {
    area: "worker", behaviour: "a checkpoint shard is reported saved only once its file is durable",
    file: "src/worker/handlers/checkpoints.ts",
    edits: one("    const write = writeShardFile(", "    s.send({ _tag: \"FetchResult\", ident: m.ident, value: { file, bytes: 0, hashes: tensors.map((t) => hashBytes(t.host.data)), ms: 0 } })\n    const write = writeShardFile("),
    tests: ["tests/checkpoint/crash.test.ts"],
  },
  {
    area: "worker", behaviour: "a checkpoint block whose bytes do not hash to the manifest's is refused",
    file: "src/worker/handlers/checkpoints.ts",
    edits: one("if (src.hash !== null && hashBytes(data) !== src.hash)", "if (src.hash === \"never\")"),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "worker", behaviour: "checkpoint paths leading out of the checkpoint root are refused",
    file: "src/checkpoint/files.ts",
    edits: one("  if (!inside(full) || relative(base, full).split(sep).includes(\"..\")) throw", "  if (false) throw"),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "controller", behaviour: "a checkpoint load gives each rank the block it held",
    file: "src/controller/checkpoint.ts",
    edits: one("const held = rec.shards[rec.holders[saved.ranks[i]!]!]", "const held = rec.shards[0]"),
    tests: ["tests/checkpoint/save.test.ts", "tests/checkpoint/resume.test.ts"],
  },
  {
    area: "controller", behaviour: "a checkpoint export puts each block at its offsets in the whole tensor",
    file: "src/controller/checkpoint.ts",
    edits: one("blockRuns(lay.shape, b.offsets, local)", "blockRuns(lay.shape, local.map(() => 0), local)"),
    tests: ["tests/checkpoint/export.test.ts", "tests/checkpoint/gpt.test.ts"],
  },
  {
    area: "controller", behaviour: "a recovery from a lost worker resumes from the last checkpoint",
    file: "src/controller/recovery.ts",
    edits: one("          current = yield* launch\n          resumed = yield* resume", "          current = yield* launch\n          resumed = undefined"),
    tests: ["tests/checkpoint/recover.test.ts"],
  },
  {
    area: "controller", behaviour: "exportFile writes a relative path under the checkpoint root, where importFile reads it",
    file: "src/controller/checkpoint.ts",
    edits: one("const target = resolve(root, path)", "const target = resolve(path)"),
    tests: ["tests/checkpoint/torchload.test.ts"],
  },
  {
    area: "controller", behaviour: "exportFile refuses a relative path leading out of the checkpoint root",
    file: "src/controller/checkpoint.ts",
    edits: one('if (rel === "" || rel === ".." || rel.startsWith("../")) throw', "if (false) throw"),
    tests: ["tests/checkpoint/torchload.test.ts"],
  },
  {
    area: "worker", behaviour: "checkpoint: a prune leaves the temporary directories of saves still being written",
    file: "src/checkpoint/files.ts",
    edits: one("  const versions = readdirSync(dir, { withFileTypes: true })\n", "  for (const e of readdirSync(dir)) if (e.startsWith(\".tmp-\")) rmSync(join(dir, e), { recursive: true, force: true })\n  const versions = readdirSync(dir, { withFileTypes: true })\n"),
    tests: ["tests/checkpoint/save.test.ts", "tests/checkpoint/concurrent.test.ts"],
  },
  {
    area: "worker", behaviour: "checkpoint: a prune never removes the version LATEST names",
    file: "src/checkpoint/files.ts",
    edits: one("if (v.name !== version && v.name !== latest) rmSync(", "if (v.name !== version) rmSync("),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "worker", behaviour: "checkpoint: commits to one directory take turns under its commit lock",
    file: "src/checkpoint/files.ts",
    edits: one("      mkdirSync(lock)\n      break\n", "      break\n"),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "worker", behaviour: "checkpoint: a commit lock left by a commit that died is taken",
    file: "src/checkpoint/files.ts",
    edits: one("if (since > STALE_LOCK_MS) rmSync(", "if (since < 0) rmSync("),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "worker", behaviour: "checkpoint: a commit publishes only when every file of the version is there whole",
    file: "src/checkpoint/files.ts",
    edits: one("    if (size !== f.bytes) throw new CheckpointPathError(", "    if (size === -1) throw new CheckpointPathError("),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "worker", behaviour: "checkpoint: a state with no tensor saves (its temporary directory is made at commit)",
    file: "src/checkpoint/files.ts",
    edits: one("  mkdirSync(tmp, { recursive: true })\n", ""),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "controller", behaviour: "checkpoint: two tensors whose paths give one name are refused before anything is written",
    file: "src/controller/checkpoint.ts",
    edits: one("if (leaves.some((l) => l.name === (path ?? \"\"))) throw refuse(", "if (leaves.length < 0) throw refuse("),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "controller", behaviour: "checkpoint: keep is checked before anything is written",
    file: "src/controller/checkpoint.ts",
    edits: one("if (!Number.isSafeInteger(keep) || keep < 1) throw refuse(", "if (keep === -2) throw refuse("),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "controller", behaviour: "checkpoint: a key $tensor in the state is refused",
    file: "src/controller/checkpoint.ts",
    edits: one("if (k === TENSOR_KEY) throw refuse(", "if (k === \"never\") throw refuse("),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "controller", behaviour: "checkpoint: a failed save removes its temporary directory",
    file: "src/controller/checkpoint.ts",
    edits: one(".pipe(Effect.tapError(() => dropTmp))", ""),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "protocol", behaviour: "checkpoint: a manifest that does not match its hash is refused",
    file: "src/checkpoint/format.ts",
    edits: one("if (digest(JSON.stringify(body)) !== hash) throw bad(", "if (hash === \"never\") throw bad("),
    tests: ["tests/checkpoint/tamper.test.ts"],
  },
  {
    area: "protocol", behaviour: "checkpoint: every shard of a manifest needs the hash of its bytes",
    file: "src/checkpoint/format.ts",
    edits: one("if (typeof sh.hash !== \"string\") throw wrong(", "if (sh.hash === 0) throw wrong("),
    tests: ["tests/checkpoint/tamper.test.ts"],
  },
  {
    area: "protocol", behaviour: "checkpoint: a tensor the tree names but the manifest lacks fails the load naming it",
    file: "src/checkpoint/format.ts",
    edits: one("if (typeof ref !== \"string\" || !(ref in m.tensors)) throw bad(", "if (typeof ref !== \"string\") throw bad("),
    tests: ["tests/checkpoint/tamper.test.ts"],
  },
  {
    area: "protocol", behaviour: "checkpoint: LATEST must name a version in its own directory",
    file: "src/checkpoint/format.ts",
    edits: one("  const problem = versionProblem(v)\n  if (problem !== undefined) throw new CheckpointCorrupt(", "  const problem = versionProblem(v)\n  if (problem === \"never\") throw new CheckpointCorrupt("),
    tests: ["tests/checkpoint/tamper.test.ts"],
  },
  {
    area: "worker", behaviour: "checkpoint: a rank file whose header is not the one saved (its digest) is refused",
    file: "src/worker/handlers/checkpoints.ts",
    edits: one("if (src.saved !== null && reader.headerDigest() !== src.saved[1]) throw", "if (src.saved === undefined) throw"),
    tests: ["tests/checkpoint/tamper.test.ts"],
  },
  {
    area: "worker", behaviour: "checkpoint: a header's dtype and shape must equal the manifest's",
    file: "src/worker/handlers/checkpoints.ts",
    edits: one("if (src.saved !== null && (entry.dtype !== src.saved[0] || !sameShape(entry.shape, src.shape)))", "if (src.saved !== null && entry.dtype === \"never\")"),
    tests: ["tests/checkpoint/tamper.test.ts"],
  },
  {
    area: "worker", behaviour: "checkpoint: a rank's file is fsynced before its write reports it done",
    file: "src/checkpoint/files.ts",
    edits: one("    await fh.sync()\n", ""),
    tests: ["tests/checkpoint/durable.test.ts"],
  },
  {
    area: "controller", behaviour: "checkpoint: restoreInto releases the loaded tensors it copied",
    file: "src/controller/checkpoint.ts",
    edits: one("{ mutates: [t] })\n      s.release()\n", "{ mutates: [t] })\n"),
    tests: ["tests/checkpoint/durable.test.ts"],
  },
  {
    area: "worker", behaviour: "memory limit: a fetch's host copy counts against it",
    file: "src/worker/handlers/calls.ts",
    edits: one("holdHostCopy(s.native, bytes, `fetch of ${bytes} bytes to host`)", "(() => {})"),
    tests: ["tests/checkpoint/memory.test.ts"],
  },
  {
    area: "worker", behaviour: "memory limit: a save's snapshot counts against it",
    file: "src/worker/handlers/checkpoints.ts",
    edits: one("holdHostCopy(s.native, bytes, `save snapshot of ${bytes} bytes`)", "(() => {})"),
    tests: ["tests/checkpoint/memory.test.ts"],
  },
  {
    area: "worker", behaviour: "memory limit: a host copy is given back once sent or written",
    file: "src/worker/memory.ts",
    edits: one("    held = false\n    native.releaseMemory(bytes)\n", "    held = false\n"),
    tests: ["tests/checkpoint/memory.test.ts"],
  },

  // ---- autograd ---------------------------------------------------------------------------
  {
    area: "autograd", behaviour: "a node lets go of its saved tensors once backward has run it",
    file: "src/autograd/tape.ts",
    edits: one("    for (const t of saved) t.letGo()", ""),
    tests: ["tests/autograd/tape.test.ts"],
  },
  {
    area: "autograd", behaviour: "backward releases each temporary as soon as it is used",
    file: "src/autograd/tape.ts",
    edits: one("      node.consume()\n      sweep()\n", "      node.consume()\n"),
    tests: ["tests/autograd/tape.test.ts"],
  },
  {
    area: "autograd", behaviour: "independent branches run the latest recorded first",
    file: "src/autograd/tape.ts",
    edits: one("if (ready[i]!.seq > ready[at]!.seq) at = i", "if (ready[i]!.seq < ready[at]!.seq) at = i"),
    tests: ["tests/autograd/tape.test.ts"],
  },
  {
    area: "autograd", behaviour: "releasing the outputs of an unused graph lets go of what it saved",
    file: "src/autograd/tape.ts",
    edits: one("    this.node?.unused()", ""),
    tests: ["tests/autograd/tape.test.ts"],
  },
  {
    area: "autograd", behaviour: "a second backward through a consumed graph is refused",
    file: "src/autograd/tape.ts",
    edits: one("    if (k.consumed) throw", "    if (k.consumed && false) throw"),
    tests: ["tests/autograd/tape.test.ts"],
  },
  {
    area: "autograd", behaviour: "a release waits for the tape's holds",
    file: "src/controller/handles.ts",
    edits: one("    if (this.#released || this.#holds > 0) return", "    if (this.#released) return"),
    tests: ["tests/autograd/tape.test.ts"],
  },
  {
    area: "autograd", behaviour: "a release the tape finished is not sent twice",
    file: "src/controller/handles.ts",
    edits: one("    if (this.#released || this.#holds > 0) return", "    if (this.#holds > 0) return"),
    tests: ["tests/autograd/tape.test.ts"],
  },
  {
    area: "autograd", behaviour: "an in-place op on a tensor that requires grad is refused while recording",
    file: "src/controller/autograd.ts",
    edits: one("  if (t !== undefined) throw refuse", "  if (t === null) throw refuse"),
    tests: ["tests/autograd/tape.test.ts"],
  },
  {
    area: "autograd", behaviour: "the gradients a recorded backward returns are released once used",
    file: "src/controller/autograd.ts",
    edits: one("    if (g !== undefined && g !== grad) made?.push(g)", ""),
    tests: ["tests/autograd/tape.test.ts"],
  },
  {
    area: "autograd", behaviour: "the tape sums a broadcast gradient back to its input's shape",
    file: "src/controller/autograd.ts",
    edits: one("summed = sumTo(opsFor(g.mesh), g, m.shape, to.shape)", "summed = g"),
    tests: ["tests/autograd/gradcheck.test.ts", "tests/autograd/tape.test.ts"],
  },
  {
    area: "autograd", behaviour: "mul's gradient for other is grad times input",
    file: "src/ops/specs/elementwise.ts",
    edits: one("other: () => o.mul(c.grad, c.args.input) })),", "other: () => o.mul(c.grad, c.args.other) })),"),
    tests: ["tests/autograd/gradcheck.test.ts"],
  },
  {
    area: "autograd", behaviour: "cross_entropy's smoothed target spreads label_smoothing over the classes",
    file: "src/ops/specs/nn.ts",
    edits: one("1 - s), s / classes)", "1 - s), s)"),
    tests: ["tests/autograd/gradcheck.test.ts"],
  },

  // ---- the C shim (an edit in c/: the copy builds its own build/) -------------------------
  {
    area: "worker", behaviour: "shim_binary refuses operands of two dtypes",
    file: "c/common/checks.c",
    edits: one("  if (a->dtype != b->dtype)\n    return shim_fail(SHIM_E_INVALID, \"shim_binary(%s): dtypes differ", "  if (0)\n    return shim_fail(SHIM_E_INVALID, \"shim_binary(%s): dtypes differ"),
    tests: ["tests/shim/elementwise.test.ts"],
  },

  // ---- a sample of the newest code: views, kernels, recordings, checkpoints, optimizers, ---
  // placements, the worker's collectives and the cpu shim
  {
    area: "worker", behaviour: "an index equal to the dim's size is refused (cpu gather/index_select/scatter/index_add)",
    file: "c/cpu/strided.c",
    edits: one("    if (ix[j] < 0 || ix[j] >= r)\n", "    if (ix[j] < 0 || ix[j] > r)\n"),
    tests: ["tests/shim/threads.test.ts"],
  },
  {
    area: "worker", behaviour: "a returned tensor of another dtype than declared is refused (ResultMismatch)",
    file: "src/worker/handlers/calls.ts",
    edits: one("if (d.dtype !== t.dtype || !sameShape(d.shape, t.shape))", "if (!sameShape(d.shape, t.shape))"),
    tests: ["tests/worker/declared.test.ts", "tests/worker/inProcess.test.ts"],
  },
  {
    area: "worker", behaviour: "a collective's input of another dtype than its factory joins with zeros and fails (InputMismatch)",
    file: "src/worker/handlers/collectives.ts",
    edits: one("if (tensor.dtype === factory.dtype && sameShape(tensor.shape, factory.shape))", "if (sameShape(tensor.shape, factory.shape))"),
    tests: ["tests/worker/resources.test.ts", "tests/worker/collectives.test.ts"],
  },
  {
    area: "worker", behaviour: "tril/triu rows of a thread's range start at the right row of their matrix",
    file: "c/cpu/indexing.c",
    edits: one("for (int64_t r = begin, i = begin % j->rows; r < end;", "for (int64_t r = begin, i = 0; r < end;"),
    tests: ["tests/shim/threads.test.ts"],
  },
  {
    area: "worker", behaviour: "rand and randn refuse a dtype that is not floating",
    file: "src/ops/specs/creation.ts",
    edits: one("({ size, dtype }, op) => [floatingDraw(op, { dtype, shape: size })]", "({ size, dtype }) => [{ dtype, shape: size }]"),
    tests: ["tests/ops/creation.test.ts"],
  },
  {
    area: "autograd", behaviour: "embedding's negative padding_idx counts from the end in its gradient",
    file: "src/ops/specs/nn.ts",
    edits: one("o.eq(ids, pad < 0 ? pad + rows : pad)", "o.eq(ids, pad)"),
    tests: ["tests/autograd/gradcheck.test.ts", "tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "round with negative decimals rounds to tens",
    file: "src/ops/kernels.ts",
    edits: one("ten = 10 ** Math.abs(a.decimals)", "ten = 10 ** a.decimals"),
    tests: ["tests/ops/parity.test.ts", "tests/ops/math.test.ts"],
  },
  {
    area: "worker", behaviour: "div with rounding_mode trunc rounds toward zero",
    file: "src/ops/kernels.ts",
    edits: one("  k.unary(\"trunc\", q, q, run.stream)\n  if (q !== out)", "  k.unary(\"floor\", q, q, run.stream)\n  if (q !== out)"),
    tests: ["tests/ops/math.test.ts", "tests/ops/parity.test.ts"],
  },
  {
    area: "controller", behaviour: "clipGradNorm sums a sharded gradient's squares over the dims it is sharded on",
    file: "src/optim/clip.ts",
    edits: one("const sum = dims.length === 0 ? local :", "const sum = dims.length >= 0 ? local :"),
    tests: ["tests/optim/clip.test.ts"],
  },
  {
    area: "controller", behaviour: "cosineDecay stays at minLr past its steps",
    file: "src/optim/schedule.ts",
    edits: one("Math.cos(Math.PI * Math.min(t, steps) / steps)", "Math.cos(Math.PI * t / steps)"),
    tests: ["tests/optim/optim.test.ts"],
  },

  {
    area: "controller", behaviour: "a replayed call counts as a use, so the recording evicted past maxRecordings is the one called least recently",
    file: "src/controller/recording.ts",
    edits: one("      found!.usedAt = ++clock\n", ""),
    tests: ["tests/recordings/delete.test.ts"],
  },
  {
    area: "worker", behaviour: "a one-element slice with a step is a view of its input",
    file: "src/ops/specs/layout.ts",
    edits: one("if ((length > 1 && step !== 1) || (outer !== 1 && length !== shape[d])) return undefined", "if (step !== 1 || (outer !== 1 && length !== shape[d])) return undefined"),
    tests: ["tests/ops/views.test.ts"],
  },
  {
    area: "worker", behaviour: "a replicated block is saved by its first holder only",
    file: "src/controller/placement.ts",
    edits: one("    if (d.kind === \"replicate\") first &&= coords[m] === 0\n", "    if (d.kind === \"replicate\") first &&= true\n"),
    tests: ["tests/checkpoint/save.test.ts", "tests/checkpoint/export.test.ts"],
  },
  {
    area: "controller", behaviour: "all_to_all keeps the other dims' shards on the same tensor dim",
    file: "src/controller/placement.ts",
    edits: one("const shift = reduction === \"stack\" ? (scatter ? 0 : 1) : scatter ? -1 : 0", "const shift = reduction === \"stack\" ? 1 : scatter ? -1 : 0"),
    tests: ["tests/gpt/placement.test.ts"],
  },
  {
    area: "controller", behaviour: "a released handle collected later is not deleted or counted again",
    file: "src/controller/handles.ts",
    edits: one("    this.#released = true\n    this.#dropped!.done = true\n", "    this.#released = true\n"),
    tests: ["tests/controller/lifetime.test.ts", "tests/controller/steps.test.ts"],
  },
  {
    area: "worker", behaviour: "transpose moves every byte of 8-byte elements",
    file: "c/cpu/layout.c",
    edits: one("    case 8: TRANSPOSE_TILES(8); break;", "    case 8: TRANSPOSE_TILES(4); break;"),
    tests: ["tests/shim/linalg.test.ts", "tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "a prepared add or sub with alpha other than 1 scales other",
    file: "src/ops/kernels.ts",
    edits: one("typeof a.other !== \"number\" || (a.alpha !== undefined && a.alpha !== 1)) return undefined", "typeof a.other !== \"number\") return undefined"),
    tests: ["tests/recordings/worker.test.ts"],
  },
  {
    area: "worker", behaviour: "amsgrad's running maximum keeps a NaN (torch.maximum)",
    file: "c/cpu/optim.c",
    edits: one("second = (second > top || second != second) ? second : top; /* torch.maximum: NaN wins */         \\", "second = second > top ? second : top; /* torch.maximum: NaN wins */         \\"),
    tests: ["tests/optim/optim.test.ts"],
  },
  {
    area: "worker", behaviour: "a safetensors file with bytes after its last tensor is refused",
    file: "src/checkpoint/format.ts",
    edits: one("  if (dataStart + end < fileSize) throw bad(", "  if (false) throw bad("),
    tests: ["tests/checkpoint/save.test.ts"],
  },
  {
    area: "autograd", behaviour: "backward refuses when a tensor a node saved was written in place since (the version counter)",
    file: "src/autograd/tape.ts",
    edits: one("      if (t.version !== this.versions[i]) return { tensor: t, then: this.versions[i]!, now: t.version }\n", ""),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "autograd", behaviour: "a view, detach() and a borrow share their base's version counter",
    file: "src/controller/handles.ts",
    edits: one("    this.storage = base.storage\n", ""),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "autograd", behaviour: "every in-place write (an op, copy_, an optimizer step, a function's mutates, an in-place collective) moves the version counter",
    file: "src/controller/mesh.ts",
    edits: one("    t.storage.version++\n    this.core.tracing?.written.add(t.storage)", "    this.core.tracing?.written.add(t.storage)"),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "autograd", behaviour: "exp saves its result, not its input (torch's saved tensors)",
    file: "src/ops/saves.ts",
    edits: one("exp: RESULT, log: INPUT", "exp: INPUT, log: INPUT"),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "autograd", behaviour: "mean along a dim saves its input (torch's saved tensors)",
    file: "src/ops/saves.ts",
    edits: one("mean: (a) => (a.dim === null ? NONE : INPUT),", "mean: NONE,"),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "autograd", behaviour: "relu's gradient reads its result (what torch saves), not its input",
    file: "src/ops/specs/elementwise.ts",
    edits: one("relu: unary(\"same\", unaryRule((o, _x, y, g) => o.where(o.gt(y, 0), g, 0))),", "relu: unary(\"same\", unaryRule((o, x, _y, g) => o.where(o.gt(x, 0), g, 0))),"),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "autograd", behaviour: "div's gradient for its divisor reads its operands (what torch saves), not its result",
    file: "src/ops/specs/elementwise.ts",
    edits: one("other: () => o.neg(o.div(o.mul(c.grad, c.args.input), o.mul(c.args.other, c.args.other))) }", "other: () => o.neg(o.div(o.mul(c.grad, c.out), c.args.other)) }"),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "autograd", behaviour: "mul saves the other operand only for the input whose gradient is wanted",
    file: "src/ops/saves.ts",
    edits: one('mul: PRODUCT("input", "other"),\n  div:', 'mul: { input: ["input", "other"], other: ["input", "other"] },\n  div:'),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "autograd", behaviour: "a tensor is saved only when an input whose gradient needs it requires grad",
    file: "src/controller/autograd.ts",
    edits: one("    if (!requiresGrad(t)) return\n    for (const n of saves", "    for (const n of saves"),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "autograd", behaviour: "a compiled step's replay moves the version counter of what its trace wrote in place",
    file: "src/controller/recording.ts",
    edits: one('  for (const w of recording.written) ("arg" in w ? flat.tensors[w.arg]!.storage : w).version++\n', ""),
    tests: ["tests/autograd/inplace.test.ts"],
  },
  {
    area: "autograd", behaviour: "reduce_scatter avg's backward divides the gathered gradient by the group size",
    file: "src/controller/meshgrad.ts",
    edits: one('temporary(reduce(g, "stack", false), divided)', 'reduce(g, "stack", false)'),
    tests: ["tests/gpt/meshgrad.test.ts"],
  },
  {
    area: "autograd", behaviour: "prod's gradient is 0 across a slice holding two or more zeros",
    file: "src/ops/specs/reduction.ts",
    edits: one("o.where(o.eq(zeros, 1), rest, 0)", "rest"),
    tests: ["tests/autograd/gradcheck.test.ts"],
  },
  {
    area: "autograd", behaviour: "grad() and gradGenerator() of an intermediate (not a leaf) give its own gradient",
    file: "src/autograd/tape.ts",
    edits: one("if (grad !== undefined && wanted.has(output)) {", "if (grad !== undefined && wanted.has(output) && false) {"),
    tests: ["tests/autograd/tape.test.ts"],
  },
  // ---- C kernels and shim checks (c/) ------------------------------------------------------
  // These edit the C sources: mutate.ts gives the copy its own build/ and rebuilds it there.
  {
    area: "worker", behaviour: "log_softmax rows subtract the log of the sum from x - max, not x - (max + log sum)",
    file: "c/cpu/nn.c",
    edits: one("      const float log_sum = logf(sum);\n      for (j = 0; j < r; j++) os[j] -= log_sum;", "      const float log_sum = logf(sum);\n      for (j = 0; j < r; j++) os[j] = (os[j] + m) - (m + log_sum);"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "log_softmax along a strided dim (and f64) subtracts the log of the sum from x - max",
    file: "c/cpu/nn.c",
    edits: one("os[j * inner] = (xs[j * inner] - m) - log_sum;", "os[j * inner] = xs[j * inner] - (m + log_sum);"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "f16 and bf16 log_softmax reads x - max back from its in-place scratch, not x",
    file: "c/cpu/nn.c",
    edits: one("for (j = 0; j < r; j++) os[j] -= log_sum;", "for (j = 0; j < r; j++) os[j] = (xs[j] - m) - log_sum;"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "f16 index_add rounds the product of alpha and the source as torch does",
    file: "c/cpu/indexing.c",
    edits: one("shim_f16_to_f32(shim_f32_to_f16(h16 * shim_f16_to_f32(b)))", "h16 * shim_f16_to_f32(b)"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "bf16 index_add rounds the product of alpha and the source as torch does",
    file: "c/cpu/indexing.c",
    edits: one("shim_bf16_to_f32(shim_f32_to_bf16(hbf * shim_bf16_to_f32(b)))", "hbf * shim_bf16_to_f32(b)"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "where reads a one-element other at element 0 in every chunk past the first",
    file: "c/cpu/ternary.c",
    edits: one("*y = (const U *)c + (fc ? base : 0);", "*y = (const U *)c + base;"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "where reads a one-element condition once for every chunk",
    file: "c/cpu/ternary.c",
    edits: one("for (int64_t i = 0; i < m; i++) o[i] = truth[fa ? i : 0]", "for (int64_t i = 0; i < m; i++) o[i] = truth[fa || base > 0 ? i : 0]"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "f16 and bf16 lerp, addcmul and addcdiv read a one-element operand in every chunk",
    file: "c/cpu/ternary.c",
    edits: one("    if (fc) shim_cpu_load_f32(dtype, c + base, m, xc);\n    ternary_f32(op, xo, xa, fa, xb, fb, xc, fc, v, m);", "    if (fc) shim_cpu_load_f32(dtype, c + base, m, xc);\n    ternary_f32(op, xo, xa, fa, xb, fb, xc, fc || base > 0, v, m);"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "shim_copy_strided refuses a copy that writes one element past the end of dst",
    file: "c/common/checks.c",
    edits: one("if (lo < 0 || hi >= dst->numel)", "if (lo < 0 || hi > dst->numel)"),
    tests: ["tests/shim/checks.test.ts"],
  },
  {
    area: "worker", behaviour: "shim_copy_strided refuses a copy that reads one element past the end of src",
    file: "c/common/checks.c",
    edits: one("if (lo < 0 || hi >= src->numel)", "if (lo < 0 || hi > src->numel)"),
    tests: ["tests/shim/checks.test.ts"],
  },
  {
    area: "worker", behaviour: "shim_dropout refuses a NaN p",
    file: "c/common/checks_ops.c",
    edits: one("if (!(p >= 0.0 && p <= 1.0))", "if (p < 0.0 || p > 1.0)"),
    tests: ["tests/shim/checks.test.ts"],
  },
  {
    area: "worker", behaviour: "shim_adamw refuses step 0",
    file: "c/common/optim_checks.c",
    edits: one("if (step < 1) return", "if (step < 0) return"),
    tests: ["tests/shim/checks.test.ts"],
  },
  {
    area: "worker", behaviour: "shim_sgd refuses a grad and momentum_buf that share memory",
    file: "c/common/optim_checks.c",
    edits: one("if (momentum_buf != NULL && shim_tensors_overlap(momentum_buf, grad))", "if (momentum_buf != NULL && momentum_buf != grad && shim_tensors_overlap(momentum_buf, grad))"),
    tests: ["tests/shim/checks.test.ts"],
  },
  {
    area: "worker", behaviour: "shim_scatter refuses an out that shares src's memory",
    file: "c/common/checks_ops.c",
    edits: one("if (shim_tensors_overlap(out, src) || shim_tensors_overlap(out, index))", "if (shim_tensors_overlap(out, index))"),
    tests: ["tests/shim/checks.test.ts"],
  },
  {
    area: "worker", behaviour: "shim_attention refuses a mask that is neither bool nor q's dtype",
    file: "c/common/checks_ops.c",
    edits: one("if (mask->dtype != SHIM_BOOL && mask->dtype != q->dtype)", "if (mask->dtype != SHIM_BOOL && mask->dtype > SHIM_BF16)"),
    tests: ["tests/shim/checks.test.ts"],
  },
  {
    area: "worker", behaviour: "shim_gather refuses an a that is empty along dim when index is not",
    file: "c/common/checks.c",
    edits: one("if (index->numel > 0 && a->ndim > 0 && a->shape[dim] == 0)", "if (index->numel > 0 && a->ndim > 0 && a->shape[dim] < 0)"),
    tests: ["tests/shim/checks.test.ts"],
  },
  {
    area: "worker", behaviour: "all_to_all refuses an in and out that share memory",
    file: "c/common/comm_checks.c",
    edits: one("  if (shim_tensors_overlap(in, out))\n    return shim_fail(SHIM_E_INVALID, \"%s: in and out share memory\", what);\n", ""),
    tests: ["tests/shim/comm_checks.test.ts"],
  },
  {
    area: "worker", behaviour: "a collective refuses an out of another dtype than its in",
    file: "c/common/comm_checks.c",
    edits: one("  if (out->dtype != in->dtype)\n    return shim_fail(SHIM_E_INVALID, \"%s: dtypes differ (out %s, in %s)\"", "  if (0)\n    return shim_fail(SHIM_E_INVALID, \"%s: dtypes differ (out %s, in %s)\""),
    tests: ["tests/shim/comm_checks.test.ts"],
  },
]
