// A frame that claims more bytes than the maximum is refused from its 4-byte prefix, before
// anything is allocated for it: in the frame reader both ends of the controller link use, in
// the controller's listener (the first bytes of a connection), and, for its key length, in the
// store. The worker's side, over a real link, is in tests/fuzz/frameLength.test.ts.
import { expect, test } from "bun:test"
import { checkListenerClaim, checkReaderClaim, checkStoreClaim } from "./closedDoor.ts"
import { QUIET_KIB } from "./reliability.ts"

test("FrameReader: a 4 GiB claim followed by 64 MiB is refused; no allocation, RSS flat", async () => {
  const r = await checkReaderClaim(0xffff_ffff)
  expect(r.refused).toBe(true)
  expect(r.problem).toContain("frame of 4294967295 bytes is over the 1073741824-byte maximum")
  expect(r.allocations).toEqual([])
  expect(r.rssAfterKiB - r.rssBeforeKiB).toBeLessThan(QUIET_KIB)
})

// RSS is not asserted here: in a test process that freed memory earlier, the allocator may
// reuse resident pages. The allocation spy is the measure the refusals rest on.
test("a control: a 128 MiB claim within a 256 MiB maximum is allocated, and the spy sees it", async () => {
  const r = await checkReaderClaim(128 * 1024 * 1024, 256 * 1024 * 1024)
  expect(r.refused).toBe(false)
  expect(r.allocations).toEqual([128 * 1024 * 1024])
})

test("the controller listener: a connection opening with a 4 GiB claim is closed and reported, nothing allocated", async () => {
  const r = await checkListenerClaim()
  expect(r.closed).toBe(true)
  expect(r.refused).toBe(true)
  expect(r.problem).toContain("refused a connection that sent an invalid frame before its handshake ended: frame of 4294967295 bytes")
  expect(r.allocations.filter((n) => n >= 1024 * 1024)).toEqual([])
  expect(r.rssAfterKiB - r.rssBeforeKiB).toBeLessThan(QUIET_KIB)
})

test("the store: a key length of 2^40 closes the connection and RSS stays flat", async () => {
  // The refusal itself is tests/store/wire.test.ts ("a key length over the limit is refused
  // from its 8 length bytes alone") and tests/store/server.test.ts ("1.13 key length 2^40
  // closes only that client"); this adds the memory figure with 64 MiB following the claim.
  const r = await checkStoreClaim()
  expect(r.closed).toBe(true)
  expect(r.rssAfterKiB - r.rssBeforeKiB).toBeLessThan(QUIET_KIB)
})
