// The handshake's proofs (src/net/handshake.ts) as a rule, over random transcripts (seeded): a
// proof holds for its own token, role and transcript only. Changing the token, the role (a
// reflection), either nonce (a replay), the rank, the world or the channel (a relay) each makes
// it fail; a proof of another length fails without throwing.
import { expect, test } from "bun:test"
import { proof, proves, tcpChannel, type Transcript } from "../../src/net/handshake.ts"
import { Rng } from "../fuzz/mutate.ts"

test("a proof holds only for its token, role and every part of its transcript", () => {
  const seed = Number(process.env.MONARCH_SEED ?? 0x7a11)
  const rng = new Rng(seed)
  const bytes = (n: number) => rng.bytes(n)
  const flip = (b: Uint8Array) => {
    const c = b.slice()
    c[rng.int(c.length)]! ^= 1 << rng.int(8)
    return c
  }
  for (let i = 0; i < 200; i++) {
    const token = Buffer.from(bytes(8 + rng.int(24))).toString("hex")
    const t: Transcript = {
      rank: rng.int(64), world: 64 + rng.int(64), channel: tcpChannel(`127.0.0.${1 + rng.int(200)}`, 1024 + rng.int(60000)),
      workerNonce: bytes(32), controllerNonce: bytes(32),
    }
    const role = rng.int(2) === 0 ? "worker" : "controller"
    const other = role === "worker" ? "controller" : "worker"
    const p = proof(token, role, t)
    const why = `seed ${seed}, case ${i}`
    expect(p.length, why).toBe(32)
    expect(proves(p, token, role, t), why).toBe(true)
    expect(proves(p, token, other, t), `${why}: reflected as the other role`).toBe(false)
    expect(proves(p, token + "x", role, t), `${why}: another token`).toBe(false)
    expect(proves(p, token.slice(1), role, t), `${why}: another token`).toBe(false)
    expect(proves(p, token, role, { ...t, workerNonce: flip(t.workerNonce) }), `${why}: another worker nonce`).toBe(false)
    expect(proves(p, token, role, { ...t, controllerNonce: flip(t.controllerNonce) }), `${why}: another controller nonce`).toBe(false)
    expect(proves(p, token, role, { ...t, workerNonce: t.controllerNonce, controllerNonce: t.workerNonce }), `${why}: nonces swapped`).toBe(false)
    expect(proves(p, token, role, { ...t, rank: t.rank + 1 }), `${why}: another rank`).toBe(false)
    expect(proves(p, token, role, { ...t, world: t.world + 1 }), `${why}: another world`).toBe(false)
    expect(proves(p, token, role, { ...t, channel: t.channel.replace(/\d+$/, (port) => String(Number(port) + 1)) }), `${why}: another channel`).toBe(false)
    expect(proves(flip(p), token, role, t), `${why}: a changed bit`).toBe(false)
    expect(proves(p.subarray(0, 31), token, role, t), `${why}: short`).toBe(false)
  }
})

test("an IPv4 address mapped into IPv6 names the same channel as the IPv4 address", () => {
  expect(tcpChannel("::ffff:127.0.0.1", 4000)).toBe(tcpChannel("127.0.0.1", 4000))
  expect(tcpChannel("::1", 4000)).not.toBe(tcpChannel("127.0.0.1", 4000))
})
