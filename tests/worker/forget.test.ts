/**
 * A restartable worker between controllers forgets its group communicators' store keys: the
 * next controller numbers meshes and commands from the start again, so its groups take the same
 * keys, and an address left from the last one was read by a peer before its owner published
 * the new one (connect refused: the flake of controllerReplacedThroughStore).
 */
import { describe, expect, test } from "bun:test"
import { Effect } from "effect"
import { Comm } from "../../ffi/comm.ts"
import { loadNative } from "../../ffi/native.ts"
import { Communicators } from "../../src/comm/communicators.ts"

const native = loadNative("cpu")
const soloComm = () => {
  const comm = Comm.create(native, 0, 1, 5000, "")
  comm.connect([comm.address()])
  return comm
}

describe("Communicators.forget", () => {
  test("deletes every opened group's address and note keys and closes the groups", async () => {
    const forgotten: string[][] = []
    const connected: string[] = []
    const comms = new Communicators(soloComm(), (key) => Effect.sync(() => (connected.push(key), soloComm())), {
      abandoned: () => Effect.succeed(undefined), abandon: () => Effect.void,
      forget: (keys) => Effect.sync(() => void forgotten.push([...keys])),
    })
    const open = (ident: number) => {
      const r = comms.collective(2, ["all"], () => [0, 1], ident, () => "ran")
      return typeof r === "string" ? r : Effect.runPromise(r)
    }
    expect(await open(1)).toBe("ran")
    await Effect.runPromise(comms.forget())
    expect(forgotten).toEqual([["comm/mesh2/all@0/1/0", "comm/mesh2/all@0/1/1", "comm/mesh2/all@0/1/abandoned"]])
    // The next controller's mesh 2 opens again (the old communicator is gone), under the same key.
    expect(await open(1)).toBe("ran")
    expect(connected).toEqual(["comm/mesh2/all@0/1", "comm/mesh2/all@0/1"])
    // Nothing opened since: nothing to delete.
    await Effect.runPromise(comms.forget())
    await Effect.runPromise(comms.forget())
    expect(forgotten.length).toBe(2)
  })
})
