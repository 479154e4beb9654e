/**
 * A host tensor's values as text, laid out as torch 1.13 prints a tensor (its _tensor_str with
 * the default print options): every element padded to one width, floats with 4 decimals (as
 * integers with a trailing point when all are integral, in scientific notation when they span
 * more than 1000x or pass 1e8, or fall under 1e-4), rows wrapped at 80 characters, and past 1000
 * elements only the first and last 3 of each dim around `...`.
 */
import type { DType, ElementArray } from "./tensor.ts"

const PRECISION = 4, THRESHOLD = 1000, EDGE_ITEMS = 3, LINE_WIDTH = 80
const FLOATING: ReadonlySet<DType> = new Set(["f32", "f64", "f16", "bf16"])

/**
 * v rounded to PRECISION decimals as Python rounds them: an exact tie goes to the even digit,
 * where JS's toFixed and toExponential go away from zero. The long form is exact for every value
 * that can tie (a short binary fraction).
 */
const rounded = (v: number, form: "toFixed" | "toExponential"): string => {
  const [mantissa, exponent] = v[form](PRECISION + 40).split("e")
  const cut = mantissa!.indexOf(".") + 1 + PRECISION, kept = mantissa!.slice(0, cut)
  if (!/^50*$/.test(mantissa!.slice(cut)) || Number(kept.at(-1)) % 2 !== 0) return v[form](PRECISION)
  return exponent === undefined ? kept : `${kept}e${exponent}`
}

/** Python's '{:.4e}': the exponent has a sign and at least two digits. */
const scientific = (v: number): string => rounded(v, "toExponential").replace(/e([+-])(\d)$/, "e$10$2")

const special = (v: number): string | undefined => (Number.isNaN(v) ? "nan" : v === Infinity ? "inf" : v === -Infinity ? "-inf" : undefined)

/** torch's _Formatter: how every element of the (summarized) values prints, padded to its width. */
const formatter = (dtype: DType, values: ReadonlyArray<number | bigint>): { format: (v: number | bigint) => string; width: number } => {
  let width = 1
  if (!FLOATING.has(dtype)) {
    const text = (v: number | bigint) => (dtype === "bool" ? (v ? "True" : "False") : String(v))
    for (const v of values) width = Math.max(width, text(v).length)
    return { format: (v) => text(v).padStart(width), width }
  }
  const finite = (values as number[]).filter((v) => Number.isFinite(v) && v !== 0)
  let style: "fixed" | "int" | "sci" = "int"
  if (finite.length > 0) {
    const abs = finite.map(Math.abs), min = Math.min(...abs), max = Math.max(...abs)
    const integral = finite.every((v) => v === Math.ceil(v))
    if (max / min > 1000 || max > 1e8 || (!integral && min < 1e-4)) style = "sci"
    else style = integral ? "int" : "fixed"
    for (const v of finite) width = Math.max(width, floatText(style, v).length)
  }
  return { format: (v) => (special(v as number) ?? floatText(style, v as number)).padStart(width), width }
}

const floatText = (style: "fixed" | "int" | "sci", v: number): string => (style === "sci" ? scientific(v) : style === "int" ? `${v.toFixed(0)}.` : rounded(v, "toFixed"))

type Nested = ReadonlyArray<Nested> | number | bigint

/** The values as nested arrays, each dim cut to its first and last EDGE_ITEMS when summarizing ("..." marks the cut). */
const nest = (elements: ElementArray, shape: ReadonlyArray<number>, summarize: boolean, dtype: DType): Nested => {
  const strides = shape.map((_, d) => shape.slice(d + 1).reduce((a, b) => a * b, 1))
  const at = (d: number, offset: number): Nested => {
    if (d === shape.length) {
      const v = elements[offset]!
      return typeof v === "bigint" ? v : dtype === "bool" ? Number(v !== 0) : v
    }
    const n = shape[d]!
    const index = summarize && n > 2 * EDGE_ITEMS ? [...Array(EDGE_ITEMS).keys(), -1, ...Array.from({ length: EDGE_ITEMS }, (_, i) => n - EDGE_ITEMS + i)] : [...Array(n).keys()]
    return index.map((i) => (i < 0 ? ELLIPSIS : at(d + 1, offset + i * strides[d]!))) as unknown as Nested
  }
  return at(0, 0)
}
const ELLIPSIS = Symbol("...")

const leaves = (n: Nested): Array<number | bigint> => (Array.isArray(n) ? n.flatMap(leaves) : typeof n === "symbol" ? [] : [n as number | bigint])

const body = (n: Nested, dims: number, indent: number, format: (v: number | bigint) => string, width: number): string => {
  if (dims === 0) return format(n as number | bigint)
  const items = n as ReadonlyArray<Nested | symbol>
  if (dims === 1) {
    const data = items.map((v) => (typeof v === "symbol" ? " ..." : format(v as number | bigint)))
    const perLine = Math.max(1, Math.floor((LINE_WIDTH - indent) / (width + 2)))
    const lines: string[] = []
    for (let i = 0; i < data.length; i += perLine) lines.push(data.slice(i, i + perLine).join(", "))
    return `[${lines.join(`,\n${" ".repeat(indent + 1)}`)}]`
  }
  const slices = items.map((v) => (typeof v === "symbol" ? "..." : body(v as Nested, dims - 1, indent + 1, format, width)))
  return `[${slices.join(`,${"\n".repeat(dims - 1)}${" ".repeat(indent + 1)}`)}]`
}

/**
 * `prefix(values[, size=(...)][, dtype=...])` as torch prints `tensor(...)`: `dtypeName` names
 * the dtype when it is not one torch leaves unsaid (float32, int64, bool), `size` is shown for
 * an empty tensor that is not 1-dim.
 */
export const formatTensor = (prefix: string, dtype: DType, shape: ReadonlyArray<number>, elements: ElementArray, dtypeName: (d: DType) => string): string => {
  const numel = shape.reduce((a, b) => a * b, 1)
  const suffixes: string[] = []
  let values: string
  if (numel === 0) {
    values = "[]"
    if (shape.length !== 1) suffixes.push(`size=(${shape.join(", ")})`)
  } else {
    const nested = nest(elements, shape, numel > THRESHOLD, dtype)
    const { format, width } = formatter(dtype, leaves(nested))
    values = body(nested, shape.length, prefix.length + 1, format, width)
  }
  // torch leaves float32, int64 and bool unsaid, but an empty tensor's dtype other than float32 is said (no values show it).
  if (numel === 0 ? dtype !== "f32" : !["f32", "i64", "bool"].includes(dtype)) suffixes.push(`dtype=${dtypeName(dtype)}`)
  // torch's _add_suffixes: a suffix that would pass the line width goes on a line of its own.
  const indent = prefix.length + 1
  let out = `${prefix}(${values}`, lastLine = out.length - out.lastIndexOf("\n") + 1
  for (const suffix of suffixes) {
    if (lastLine + suffix.length + 2 > LINE_WIDTH) {
      out += `,\n${" ".repeat(indent)}${suffix}`
      lastLine = indent + suffix.length
    } else {
      out += `, ${suffix}`
      lastLine += suffix.length + 2
    }
  }
  return `${out})`
}
