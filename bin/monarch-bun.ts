#!/usr/bin/env bun
/**
 * The package's command line:
 *
 *   monarch-bun worker                          a worker (src/worker.ts), configured by its environment
 *   monarch-bun launch --nproc N -- <program>   our launcher (src/launch.ts); the program `worker` is a worker
 *   monarch-bun build                           builds the native library (make, gcc, g++, libgloo-dev, libopenblas-dev)
 */
import { spawnSync } from "node:child_process"

const ROOT = new URL("..", import.meta.url).pathname
const WORKER = new URL("../src/worker.ts", import.meta.url).pathname
const USAGE = `usage: monarch-bun worker | monarch-bun launch --nproc N [--host ADDR] [--store-port PORT] -- <program|worker> [args...] | monarch-bun build`

const [command] = process.argv.splice(2, 1)
switch (command) {
  case "worker":
    await import(WORKER)
    break
  case "launch": {
    const split = process.argv.indexOf("--")
    if (split >= 0 && process.argv[split + 1] === "worker") process.argv[split + 1] = WORKER
    await import("../src/launch.ts")
    break
  }
  case "build":
    process.exit(spawnSync("sh", [`${ROOT}scripts/build-native.sh`, "--required"], { stdio: "inherit" }).status ?? 1)
    break
  default:
    console.error(command === undefined || command === "--help" ? USAGE : `monarch-bun: unknown command ${JSON.stringify(command)}\n${USAGE}`)
    process.exit(command === "--help" ? 0 : 2)
}
