/**
 * The job token, from the environment: MONARCH_TOKEN, or the contents of the file
 * MONARCH_TOKEN_FILE names (a trailing newline dropped). The controller and every worker read it
 * the same way, and prove to each other that they hold it without sending it (handshake.ts). It
 * never goes through the store: torch's TCPStore protocol has no authentication, so anything
 * there is anyone's who can reach it.
 */
import { readFileSync } from "node:fs"

/** A longer token is taken for a mistake (the wrong file named, say). */
export const MAX_TOKEN_LENGTH = 1024

/** The token the environment gives, undefined when it gives none; a message when it is unusable. */
export const readToken = (env: Readonly<Record<string, string | undefined>> = process.env): { readonly token: string | undefined } | { readonly problem: string } => {
  let token: string
  if (env.MONARCH_TOKEN) token = env.MONARCH_TOKEN
  else if (env.MONARCH_TOKEN_FILE) {
    try {
      token = readFileSync(env.MONARCH_TOKEN_FILE, "utf8").replace(/\r?\n$/, "")
    } catch (e) {
      return { problem: `MONARCH_TOKEN_FILE=${env.MONARCH_TOKEN_FILE} cannot be read: ${(e as Error).message}` }
    }
    if (token.length === 0) return { problem: `MONARCH_TOKEN_FILE=${env.MONARCH_TOKEN_FILE} is empty` }
  } else return { token: undefined }
  const problem = tokenProblem(token)
  return problem === undefined ? { token } : { problem }
}

/** Why `token` cannot be a job token, or undefined. */
export const tokenProblem = (token: string): string | undefined =>
  token.length > MAX_TOKEN_LENGTH ? `the job token is ${token.length} characters; at most ${MAX_TOKEN_LENGTH} are allowed (is MONARCH_TOKEN_FILE the right file?)` : undefined
