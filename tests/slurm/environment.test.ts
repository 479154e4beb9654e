// A SLURM task's environment (src/worker/slurm.ts) and the worker configuration read from it.
// The hostlist expansion is checked on random lists against a reference built here from the
// grammar (each random list is generated together with the names it stands for), and, where
// Slurm is installed, against `scontrol show hostnames` itself.
import { describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ConfigError, readConfig } from "../../src/worker/config.ts"
import { defaultStorePort, expandHostlist, expandTasksPerNode, readSlurmPlace, SlurmError } from "../../src/worker/slurm.ts"
import { testUnless } from "../skip.ts"

/** A seeded generator (mulberry32), so a failure names the seed that reproduces it. */
const rng = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = seed
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

/**
 * A random hostlist and the names it stands for, built from the grammar: a list of names
 * separated by "," (or spaces); a name is text and bracket groups, ending in a group when it has
 * any; a group is a comma list of numbers and lo-hi ranges, each number padded with zeros to its
 * low bound's width. Several groups expand with the last varying fastest, then the first, second
 * and so on (what scontrol 22.05 prints).
 */
const randomHostlist = (random: () => number): { text: string; names: string[] } => {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(random() * xs.length)]!
  const int = (n: number) => Math.floor(random() * n)
  const word = () => Array.from({ length: 1 + int(5) }, () => pick([..."abcdefghijklmnopqrstuvwxyz", "-", "_", "."])).join("").replace(/^[-.]/, "n")
  const group = (): { text: string; values: string[] } => {
    const parts: string[] = [], values: string[] = []
    for (let p = 0; p <= int(3); p++) {
      const width = 1 + int(3), lo = int(width === 1 ? 10 : 40), hi = lo + int(12)
      const pad = (n: number) => String(n).padStart(width, "0")
      if (random() < 0.3) {
        parts.push(pad(lo))
        values.push(pad(lo))
      } else {
        parts.push(`${pad(lo)}-${hi}`)
        for (let n = lo; n <= hi; n++) values.push(pad(n))
      }
    }
    return { text: `[${parts.join(",")}]`, values }
  }
  const names: string[] = [], items: string[] = []
  for (let i = 0; i <= int(4); i++) {
    const groups = random() < 0.25 ? 0 : 1 + int(random() < 0.7 ? 1 : 3)
    const pieces = Array.from({ length: groups }, () => (random() < 0.8 ? word() : ""))
    if (groups === 0) {
      const plain = `${word()}${int(100)}`
      items.push(plain)
      names.push(plain)
      continue
    }
    if (pieces[0] === "") pieces[0] = word()
    const gs = Array.from({ length: groups }, group)
    items.push(pieces.map((p, g) => p + gs[g]!.text).join(""))
    // The odometer: slowest group first in `order`, the last group fastest.
    const order = [...Array.from({ length: groups - 1 }, (_, k) => groups - 2 - k), groups - 1]
    const rec = (d: number, chosen: string[]) => {
      if (d === order.length) return void names.push(pieces.map((p, g) => p + chosen[g]).join(""))
      for (const v of gs[order[d]!]!.values) {
        const next = [...chosen]
        next[order[d]!] = v
        rec(d + 1, next)
      }
    }
    rec(0, Array(groups).fill(""))
  }
  return { text: items.join(random() < 0.8 ? "," : " "), names }
}

const SEED = Number(process.env.SLURM_TEST_SEED ?? Date.now() % 1_000_000)

const scontrolMissing = Bun.which("scontrol") === null ? "slurm-client (scontrol) is not installed; tests/slurm/slurm.test.ts installs it" : undefined

/** `scontrol show hostnames` for each list, with a config file it can read with no controller (all that command needs). */
const showHostnames = (lists: ReadonlyArray<string>): string[][] => {
  const dir = mkdtempSync(join(tmpdir(), "monarch-scontrol-"))
  try {
    const conf = join(dir, "slurm.conf")
    writeFileSync(conf, "ClusterName=expand\nSlurmctldHost=localhost\nNodeName=localhost\nPartitionName=p Nodes=localhost\n")
    return lists.map((list) => {
      const r = Bun.spawnSync(["scontrol", "show", "hostnames", list], { env: { ...process.env, SLURM_CONF: conf }, stdout: "pipe", stderr: "pipe" })
      return r.stdout.toString().split("\n").filter((l) => l !== "")
    })
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

describe("hostlist expansion", () => {
  test("the documented forms: ranges, lists, zero padding, several groups, several names", () => {
    expect(expandHostlist("node[01-03,07],gpu-a[1-2]")).toEqual(["node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2"])
    expect(expandHostlist("n[08-10]")).toEqual(["n08", "n09", "n10"])
    expect(expandHostlist("n[7-10]")).toEqual(["n7", "n8", "n9", "n10"])
    expect(expandHostlist("n[001-5]")).toEqual(["n001", "n002", "n003", "n004", "n005"])
    expect(expandHostlist("r[1-2]-n[01-02],z")).toEqual(["r1-n01", "r1-n02", "r2-n01", "r2-n02", "z"])
    expect(expandHostlist("a[1-2]b[3-4]c[5-6]")).toEqual(["a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"])
    expect(expandHostlist("x,y,x")).toEqual(["x", "y", "x"])
    expect(expandHostlist(" a , b ")).toEqual(["a", "b"])
    expect(expandHostlist("n1-2")).toEqual(["n1-2"])
    expect(expandHostlist("[1-2]")).toEqual(["1", "2"])
  })

  test("malformed lists are refused with a SlurmError saying why", () => {
    for (const [list, why] of [
      ["n[3-1]", "runs backwards"], ["n[1-3", "unclosed"], ["a[]", "not a number"], ["n[a-b]", "not a number"],
      ["n[1-2]x", "follows the last bracket group"], ["n[1-2]]", "unbalanced"], ["n[[1]]", "nested"], ["", "no host names"],
      ["n[1-100000]", "more than 65536"], ["n[-1]", "not a number"],
    ] as const) {
      let caught: unknown
      try {
        expandHostlist(list)
      } catch (e) {
        caught = e
      }
      expect(caught).toBeInstanceOf(SlurmError)
      expect({ list, reason: (caught as SlurmError).reason, has: (caught as SlurmError).message.includes(why) }).toEqual({ list, reason: "hostlist", has: true })
    }
  })

  test(`random lists against the grammar's reference (seed ${SEED})`, () => {
    const random = rng(SEED)
    for (let i = 0; i < 500; i++) {
      const { text, names } = randomHostlist(random)
      const got = expandHostlist(text)
      if (got.join(" ") !== names.join(" ")) throw new Error(`seed ${SEED}, list ${i}: "${text}" gave [${got.slice(0, 12)}...], expected [${names.slice(0, 12)}...]`)
    }
  })

  testUnless(scontrolMissing)(`random lists against scontrol show hostnames (seed ${SEED})`, () => {
    const random = rng(SEED + 1)
    // One scontrol per list: 60 lists keep this to a few seconds.
    const lists = [...Array.from({ length: 60 }, () => randomHostlist(random).text), "node[01-03,07],gpu-a[1-2]", "a[1-2]b[1-2]c[1-2]d[1-2]", "n[09-9]", "n[99-101]"]
    const theirs = showHostnames(lists)
    lists.forEach((text, i) => expect({ seed: SEED, text, names: expandHostlist(text) }).toEqual({ seed: SEED, text, names: theirs[i]! }))
  })
})

describe("tasks per node", () => {
  test("the compressed form: N(xM) repeats, plain N once", () => {
    expect(expandTasksPerNode("2(x3),1")).toEqual([2, 2, 2, 1])
    expect(expandTasksPerNode("4")).toEqual([4])
    expect(expandTasksPerNode("1,3(x2)")).toEqual([1, 3, 3])
    for (const bad of ["", "2(x)", "x3", "2(x0)", "-1"]) expect(() => expandTasksPerNode(bad)).toThrow(SlurmError)
  })
})

/** What srun gives the task with `procid` of `srun -N 3 -n 7` (3, 2 and 2 tasks, block distribution). */
const srunEnv = (procid: number, extra: Record<string, string> = {}): Record<string, string> => {
  const perNode = [3, 2, 2], node = procid < 3 ? 0 : procid < 5 ? 1 : 2
  return {
    SLURM_PROCID: String(procid), SLURM_NTASKS: "7", SLURM_STEP_NUM_TASKS: "7",
    SLURM_LOCALID: String(procid - perNode.slice(0, node).reduce((a, b) => a + b, 0)), SLURM_NODEID: String(node),
    SLURM_TASKS_PER_NODE: "3,2(x2)", SLURM_STEP_TASKS_PER_NODE: "3,2(x2)",
    SLURM_NODELIST: "gpu[07-09]", SLURM_STEP_NODELIST: "gpu[07-09]", SLURM_JOB_ID: "123456",
    MONARCH_TOKEN: "slurm-token",
    ...extra,
  }
}

describe("a worker started by srun", () => {
  test("rank, world, node and local place from SLURM's variables; rank 0 hosts the store on the first node", () => {
    for (let procid = 0; procid < 7; procid++) {
      const c = readConfig(srunEnv(procid))
      const local = [0, 1, 2, 0, 1, 0, 1][procid]!
      expect({ rank: c.rank, world: c.world, localRank: c.localRank, localWorld: c.localWorld, device: c.deviceOrdinal, job: c.slurmJob })
        .toEqual({ rank: procid, world: 7, localRank: local, localWorld: procid < 3 ? 3 : 2, device: local, job: 123456 })
      expect(c.store).toEqual({ host: "gpu07", port: defaultStorePort(123456), prefix: "monarch", hostedByRank0: true })
    }
    expect(defaultStorePort(123456)).toBe(15_000 + 3456)
  })

  test("the step's variables win over the job's (srun on part of an allocation)", () => {
    const p = readSlurmPlace(srunEnv(1, { SLURM_STEP_NUM_TASKS: "2", SLURM_STEP_TASKS_PER_NODE: "2", SLURM_STEP_NODELIST: "gpu09", SLURM_NODEID: "0", SLURM_LOCALID: "1" }))
    expect({ world: p.world, nodes: p.nodes, localWorld: p.localWorld, store: p.store.host }).toEqual({ world: 2, nodes: ["gpu09"], localWorld: 2, store: "gpu09" })
  })

  test("--ntasks-per-node alone gives every node that many tasks", () => {
    const env = srunEnv(3, { SLURM_NTASKS: "6", SLURM_STEP_NUM_TASKS: "6", SLURM_NTASKS_PER_NODE: "2", SLURM_NODEID: "1", SLURM_LOCALID: "1" })
    delete env.SLURM_TASKS_PER_NODE
    delete env.SLURM_STEP_TASKS_PER_NODE
    expect(readSlurmPlace(env).localWorld).toBe(2)
  })

  test("a store address given (the controller's) is used and not hosted; MASTER_ADDR/PORT say where rank 0 hosts it", () => {
    expect(readConfig(srunEnv(0, { STORE_HOSTNAME: "10.0.0.5", STORE_PORT: "29400" })).store).toEqual({ host: "10.0.0.5", port: 29400, prefix: "monarch", hostedByRank0: false })
    expect(readConfig(srunEnv(0, { MASTER_ADDR: "gpu08", MASTER_PORT: "29500" })).store).toEqual({ host: "gpu08", port: 29500, prefix: "monarch", hostedByRank0: true })
  })

  test("GPUs: one visible per task is device 0; the node's shared by SLURM_LOCALID; SLURM_STEP_GPUS by physical index", () => {
    expect(readConfig(srunEnv(2, { CUDA_VISIBLE_DEVICES: "5" })).deviceOrdinal).toBe(0)
    expect(readConfig(srunEnv(2, { CUDA_VISIBLE_DEVICES: "4,5,6" })).deviceOrdinal).toBe(2)
    expect(readConfig(srunEnv(2, { SLURM_STEP_GPUS: "4,5,6" })).deviceOrdinal).toBe(6)
    expect(() => readConfig(srunEnv(2, { CUDA_VISIBLE_DEVICES: "0,1" }))).toThrow("fewer than this node's 3 tasks")
  })

  test("torchrun's variables win when both are present (torchrun inside an allocation)", () => {
    const c = readConfig({ ...srunEnv(5), RANK: "1", WORLD_SIZE: "2", LOCAL_RANK: "1", MASTER_ADDR: "127.0.0.1", MASTER_PORT: "29000" })
    expect({ rank: c.rank, world: c.world, job: c.slurmJob, host: c.store.host }).toEqual({ rank: 1, world: 2, job: undefined, host: "127.0.0.1" })
  })

  test("inconsistent or missing variables are a ConfigError naming the variable", () => {
    const cases: Array<[Record<string, string>, string]> = [
      [{ SLURM_PROCID: "7" }, "SLURM_PROCID=7 is not below"],
      [{ SLURM_STEP_TASKS_PER_NODE: "3,2" }, "gives 2 nodes"],
      [{ SLURM_STEP_TASKS_PER_NODE: "3,3(x2)" }, "adds up to 9 tasks"],
      [{ SLURM_STEP_NODELIST: "gpu[09-07]" }, "runs backwards"],
      [{ SLURM_NODEID: "3" }, "SLURM_NODEID=3 is past"],
      [{ SLURM_LOCALID: "x" }, "SLURM_LOCALID=x is not"],
      [{ SLURM_LOCALID: "2", SLURM_PROCID: "4", SLURM_NODEID: "1" }, "SLURM_LOCALID=2 is not below this node's 2"],
      [{ SLURM_JOB_ID: "" }, "SLURM_JOB_ID / SLURM_JOBID is not set"],
      [{ MASTER_PORT: "70000" }, "not a TCP port"],
      [{ SLURM_NODEID: "1" }, "task 0 runs on node 1"],
    ]
    for (const [change, why] of cases) {
      let caught: unknown
      try {
        readConfig(srunEnv(0, change))
      } catch (e) {
        caught = e
      }
      expect({ change, isConfigError: caught instanceof ConfigError }).toEqual({ change, isConfigError: true })
      expect({ change, message: (caught as ConfigError).message.includes(why) ? why : (caught as ConfigError).message }).toEqual({ change, message: why })
    }
    const noList = srunEnv(0)
    delete noList.SLURM_NODELIST
    delete noList.SLURM_STEP_NODELIST
    expect(() => readConfig(noList)).toThrow("SLURM_STEP_NODELIST / SLURM_NODELIST is not set")
  })
})
