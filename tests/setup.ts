// Preloaded by bun test (bunfig.toml). Multi-process tests set their own longer timeouts.
import { setDefaultTimeout } from "bun:test"
setDefaultTimeout(20_000)
