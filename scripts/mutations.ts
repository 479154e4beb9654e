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
    edits: one("      complete()\n      return poison(s, ident, refs, e)", "      return poison(s, ident, refs, e)"),
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
      '          closeSession(session)\n          if (!options.restartable) return "exit"\n          session = fresh()\n          dispatch = makeDispatch(session, debug)\n',
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
    area: "worker", behaviour: "slurm: a hostlist's bracket groups expand in scontrol's order (the last fastest, then the first)",
    file: "src/worker/slurm.ts",
    edits: one("const order = [...Array.from({ length: last }, (_, i) => last - 1 - i), last]", "const order = Array.from({ length: last + 1 }, (_, i) => i)"),
    tests: ["tests/slurm/environment.test.ts"],
  },
  {
    area: "worker", behaviour: "slurm: a hostlist range is zero-padded to its low bound's width",
    file: "src/worker/slurm.ts",
    edits: one('out.push(String(n).padStart(m[1]!.length, "0"))', "out.push(String(n))"),
    tests: ["tests/slurm/environment.test.ts"],
  },
  {
    area: "worker", behaviour: "slurm: text after a hostlist's last bracket group is refused",
    file: "src/worker/slurm.ts",
    edits: one('  if (rest !== "") throw hostlistError(text, `"${rest}" follows', '  if (rest === "\0") throw hostlistError(text, `"${rest}" follows'),
    tests: ["tests/slurm/environment.test.ts"],
  },
  {
    area: "worker", behaviour: "slurm: N(xM) in the tasks per node repeats N M times",
    file: "src/worker/slurm.ts",
    edits: one("const count = m[2] === undefined ? 1 : Number(m[2])", "const count = 1"),
    tests: ["tests/slurm/environment.test.ts"],
  },
  {
    area: "worker", behaviour: "slurm: the step's task count wins over the job's",
    file: "src/worker/slurm.ts",
    edits: one('count(env, ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"])', 'count(env, ["SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"])'),
    tests: ["tests/slurm/environment.test.ts"],
  },
  {
    area: "worker", behaviour: "slurm: a given STORE_HOSTNAME is used, not hosted by rank 0",
    file: "src/worker/slurm.ts",
    edits: one("port, hostedByRank0: given === undefined }", "port, hostedByRank0: true }"),
    tests: ["tests/slurm/environment.test.ts"],
  },
  {
    area: "worker", behaviour: "slurm: a task with one visible GPU uses device 0",
    file: "src/worker/slurm.ts",
    edits: one("    if (list.length === 1) return ordinal(0)\n", ""),
    tests: ["tests/slurm/environment.test.ts"],
  },
  {
    area: "worker", behaviour: "slurm: torchrun's RANK wins over SLURM_PROCID",
    file: "src/worker/slurm.ts",
    edits: one("env.RANK === undefined && env.SLURM_PROCID !== undefined", "env.SLURM_PROCID !== undefined"),
    tests: ["tests/slurm/environment.test.ts"],
  },
  {
    area: "worker", behaviour: "slurm: the tasks per node must add up to the step's tasks",
    file: "src/worker/slurm.ts",
    edits: one("if (perNode !== undefined && tasks!.reduce((a, b) => a + b, 0) !== world)", "if (perNode !== undefined && tasks!.reduce((a, b) => a + b, 0) < 0)"),
    tests: ["tests/slurm/environment.test.ts"],
  },
  {
    area: "worker", behaviour: "slurm: each communicator's log line names the transport the shim picked (shm+tcp on one host, tcp across)",
    file: "src/comm/communicators.ts",
    edits: one('describeTransport(comm.transport(), o.hostname || "127.0.0.1")', 'describeTransport("tcp", o.hostname || "127.0.0.1")'),
    tests: ["tests/slurm/slurm.test.ts"],
  },
  // ---- controller -------------------------------------------------------------------------
  {
    area: "controller", behaviour: "a lost worker fails only the commands that need it (graph)",
    file: "src/controller/graph.ts",
    edits: one("      if (!node.waiting.delete(rank)) continue\n", "      node.waiting.delete(rank)\n"),
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
    edits: one("    if (node.exchange) for (const p of node.exchange.peers(rank)) if (node.ranks.includes(p)) push(node, p)\n", ""),
    tests: ["tests/faults/loss.test.ts"],
  },
  {
    area: "controller", behaviour: "a fetch waits only for the ranks its value depends on",
    file: "src/controller/graph.ts",
    edits: one("      if (n.waiting.has(r) && (needs.get(r) ?? -1) < n.ident) needs.set(r, n.ident)\n", "      for (const w of n.waiting) if ((needs.get(w) ?? -1) < n.ident) needs.set(w, n.ident)\n"),
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
    area: "controller", behaviour: "the job token refuses a WorkerHello",
    file: "src/controller/listener.ts",
    edits: one('if (msg._tag !== "WorkerHello" || !sameToken(msg.token, o.token)) {', 'if (msg._tag !== "WorkerHello") {'),
    tests: ["tests/security/token.test.ts", "tests/security/closedDoor.test.ts"],
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
    edits: one("      this.statusWanted = true\n", ""),
    tests: ["tests/controller/core.test.ts", "tests/controller/controller.test.ts"],
  },
  {
    area: "controller", behaviour: "a command outstanding past hangAfterMs is reported",
    file: "src/controller/core.ts",
    edits: one("      if (waitingMs < after) break\n", "      if (waitingMs < 2 * after) break\n"),
    tests: ["tests/controller/controller.test.ts"],
  },
  {
    area: "controller", behaviour: "slurm: an attached recovery sends the survivors no Exit, so every node's torchrun agent restarts its workers",
    file: "src/controller/controller.ts",
    edits: one("kill: () => api.core.abandon() }", "kill: () => {} }"),
    tests: ["tests/torchrun/restart.test.ts"],
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
    file: "src/protocol/codec.ts",
    edits: one("if (fromRanks.length !== toRanks.length) throw new Invalid(", "if (false) throw new Invalid("),
    tests: ["tests/protocol/malformed.test.ts", "tests/protocol/codec.test.ts"],
  },
  {
    area: "protocol", behaviour: "a value nesting arrays deeper than MAX_DEPTH is refused",
    file: "src/protocol/codec.ts",
    edits: one("      if (Array.isArray(v)) {\n        if (depth > MAX_DEPTH) return failValue(`nesting deeper than ${MAX_DEPTH}`)\n", "      if (Array.isArray(v)) {\n"),
    tests: ["tests/protocol/malformed.test.ts", "tests/protocol/codec.test.ts"],
  },
  {
    area: "protocol", behaviour: "a message for the other direction is refused",
    file: "src/protocol/codec.ts",
    edits: one("  if (!direction.accepts(code as number)) throw new Invalid(", "  if (false) throw new Invalid("),
    tests: ["tests/protocol/malformed.test.ts", "tests/protocol/codec.test.ts"],
  },
  {
    area: "protocol", behaviour: "a u32 in an ext payload is read little-endian in full",
    file: "src/protocol/codec.ts",
    edits: one("+ b[at + 3]! * 0x100_0000", "+ b[at + 3]! * 0x10_0000"),
    tests: ["tests/protocol/codec.test.ts"],
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
    edits: one("    at += out.shape[d]!\n  }\n}\n\n/** scaled_dot_product_attention", "  }\n}\n\n/** scaled_dot_product_attention"),
    tests: ["tests/ops/parity.test.ts"],
  },
  {
    area: "worker", behaviour: "11.2: nll_loss leaves out ignore_index targets",
    file: "src/ops/kernels.ts",
    edits: one("k.binaryScalar(\"ne\", valid, target, a.ignore_index, false, run.stream)\n  const safe", "k.binaryScalar(\"ne\", valid, target, -12345, false, run.stream)\n  const safe"),
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
]
