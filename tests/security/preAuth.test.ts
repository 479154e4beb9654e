// Before authentication, memory stays bounded: the controller listener refuses a
// frame longer than the handshake needs from its length prefix, allocating nothing for it, and
// keeps only so many connections in the handshake (closing the oldest, so a worker still gets
// in); the store, which authenticates no one, holds a bounded number of bytes in its values, in
// what its connections buffer (a reply's size checked before the reply is built), and in
// connections, each refusal closing the one connection with a reason on stderr. Memory is
// measured as RSS of the process (its peak for the MULTI_GET, and in the listener,
// FrameReader's allocations).
import { expect, test } from "bun:test"
import { MAX_HELLO_BYTES, MAX_PENDING_CONNECTIONS } from "../../src/controller/listener.ts"
import { MAX_BUFFERED_BYTES, MAX_STORED_BYTES } from "../../src/store/server.ts"
import { checkPendingFlood, checkPreAuthClaims, checkStoreAmplification, checkStoreBuffers, checkStoreFill, checkStoreLimits } from "./preAuth.ts"
import { PRE_AUTH_SLACK_KIB } from "./reliability.ts"

test("the listener: four connections opening with 512 MiB claims are refused from the prefix, nothing allocated", async () => {
  const r = await checkPreAuthClaims(4)
  expect(r.closed).toBe(4)
  expect(r.refused).toBe(4)
  expect(r.largeAllocations).toEqual([])
  expect(r.rssAfterKiB - r.rssBeforeKiB).toBeLessThan(PRE_AUTH_SLACK_KIB)
  expect(MAX_HELLO_BYTES).toBeLessThanOrEqual(8192)
}, 20_000)

test("the listener: past its limit of connections without a hello the oldest are closed, and a worker is still admitted", async () => {
  const r = await checkPendingFlood(MAX_PENDING_CONNECTIONS + 36)
  expect({ open: r.open, newestKept: r.newestKept }).toEqual({ open: MAX_PENDING_CONNECTIONS, newestKept: true })
  expect(r.evictions).toBeGreaterThanOrEqual(36)
  expect(r.helloAdmitted).toBe(true)
}, 20_000)

test("the store: 256 MiB of SETs from a stranger are refused past its bound; RSS stays near it and it still serves", async () => {
  const r = await checkStoreFill(256)
  expect(r.closed).toBeGreaterThan(0)
  expect(r.said).toContain(`the store is full: it holds`)
  expect(r.said).toContain(`bytes of its ${MAX_STORED_BYTES}`)
  expect(r.rssAfterKiB - r.rssBeforeKiB).toBeLessThan(MAX_STORED_BYTES / 1024 + PRE_AUTH_SLACK_KIB)
  expect(r.servesAfter).toBe(true)
}, 60_000)

test.each(["partial", "unread"] as const)("the store: connections holding bytes without storing them (%s) are closed past the bound", async (kind) => {
  const r = await checkStoreBuffers(kind)
  expect(r.closed).toBe(true)
  expect(r.said).toContain(`bytes they may hold together (ServerOptions.maxBufferedBytes)`)
  expect(r.rssAfterKiB - r.rssBeforeKiB).toBeLessThan(MAX_BUFFERED_BYTES / 1024 + PRE_AUTH_SLACK_KIB)
}, 30_000)

test("the store: an APPEND past the value limit, a flood of empty values and connections past the limit are refused", async () => {
  const r = await checkStoreLimits()
  expect(r.appendClosed).toBe(true)
  expect(r.appendSaid).toContain("a value of 1200 bytes for key /a is over the 1024-byte maximum")
  expect(r.emptyStored).toBeLessThanOrEqual(r.emptyBound)
  expect(r.emptyStored).toBeGreaterThan(r.emptyBound / 2)
  expect(r.extraClosed).toBe(r.extraConnections)
}, 20_000)

test("the store: one small MULTI_GET naming an 8 MiB value 64 times is refused before its reply is built; peak RSS stays within the bound", async () => {
  const r = await checkStoreAmplification(64)
  expect(r.requestBytes).toBeLessThan(1024)
  expect(r.closed).toBe(true)
  expect(r.peakAfterKiB - r.peakBeforeKiB).toBeLessThan(MAX_BUFFERED_BYTES / 1024 + PRE_AUTH_SLACK_KIB)
  expect(r.said).toContain(`a reply of ${r.replyBytes} bytes would take the connections past the ${MAX_BUFFERED_BYTES} bytes`)
  expect(r.servesAfter).toBe(true)
}, 30_000)
