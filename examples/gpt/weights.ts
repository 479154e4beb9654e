/**
 * The GPT's parameters as torch names them (`h.0.attn.q.weight`, the state_dict of
 * examples/gpt/twin.py's module), their full shapes, how tensor parallelism splits each, and
 * their initial values, drawn here once from a seed (GPT-2's: N(0, 0.02) weights, the residual
 * projections scaled by 1/sqrt(2 layers), zero biases, unit layer-norm gains) so the mesh and the
 * torch twin start from the same numbers.
 */
import { generator } from "./data.ts"

export interface GPTConfig {
  readonly vocab: number
  /** The longest sequence (position embeddings). */
  readonly block: number
  readonly dim: number
  readonly heads: number
  readonly layers: number
  /** The output head shares the token embedding's weights. */
  readonly tied: boolean
}

/**
 * How tensor parallelism splits a parameter: `column` splits a Linear's outputs (weight dim 0 and
 * its bias: whole heads, whole MLP columns), `row` its inputs (weight dim 1; the bias is added
 * once, after the reduce), `replicated` keeps it whole on every rank.
 */
export type Split = "column" | "row" | "replicated"

export interface ParamSpec {
  readonly name: string
  readonly shape: ReadonlyArray<number>
  readonly split: Split
  readonly init: "normal" | "residual" | "zeros" | "ones"
}

/** Every parameter, in the order of torch's `model.parameters()` (which AdamW's state follows). */
export const paramSpecs = (c: GPTConfig): ParamSpec[] => {
  const p = (name: string, shape: number[], split: Split, init: ParamSpec["init"]): ParamSpec => ({ name, shape, split, init })
  const linear = (name: string, out: number, inp: number, split: Split, init: ParamSpec["init"] = "normal") => [
    p(`${name}.weight`, [out, inp], split, init),
    // A row-parallel bias is added after the reduce, so it is whole on every rank.
    p(`${name}.bias`, [out], split === "column" ? "column" : "replicated", "zeros"),
  ]
  const norm = (name: string) => [p(`${name}.weight`, [c.dim], "replicated", "ones"), p(`${name}.bias`, [c.dim], "replicated", "zeros")]
  return [
    p("wte.weight", [c.vocab, c.dim], "replicated", "normal"),
    p("wpe.weight", [c.block, c.dim], "replicated", "normal"),
    ...Array.from({ length: c.layers }, (_, i) => [
      ...norm(`h.${i}.ln1`),
      ...["q", "k", "v"].flatMap((n) => linear(`h.${i}.attn.${n}`, c.dim, c.dim, "column")),
      ...linear(`h.${i}.attn.proj`, c.dim, c.dim, "row", "residual"),
      ...norm(`h.${i}.ln2`),
      ...linear(`h.${i}.mlp.fc`, 4 * c.dim, c.dim, "column"),
      ...linear(`h.${i}.mlp.proj`, c.dim, 4 * c.dim, "row", "residual"),
    ]).flat(),
    ...norm("ln_f"),
    ...(c.tied ? [] : [p("head.weight", [c.vocab, c.dim], "replicated", "normal")]),
  ]
}

/** The tensor dim a split cuts (column: the outputs, dim 0; row: the inputs, dim 1). */
export const splitDim = (s: ParamSpec): number | undefined => (s.split === "column" ? 0 : s.split === "row" ? 1 : undefined)

/** Initial values of every parameter, full (unsplit), by name. */
export const initialWeights = (c: GPTConfig, seed: number): Map<string, Float32Array> => {
  const random = generator(seed)
  // Box-Muller: two uniforms give one standard normal (the other is dropped, to keep it simple).
  const normal = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random())
  const std = { normal: 0.02, residual: 0.02 / Math.sqrt(2 * c.layers) }
  return new Map(paramSpecs(c).map((s) => {
    const n = s.shape.reduce((a, b) => a * b, 1)
    const data = new Float32Array(n)
    if (s.init === "ones") data.fill(1)
    else if (s.init !== "zeros") for (let i = 0; i < n; i++) data[i] = std[s.init] * normal()
    return [s.name, data]
  }))
}
