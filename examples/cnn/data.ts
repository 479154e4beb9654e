/**
 * The CNN's synthetic image set and initial weights, drawn here from seeds so the mesh and the
 * torch twin (examples/cnn/twin.py, handed both) see the same numbers. An image is [2, 8, 8] of
 * uniform noise with one bar of height 1 on it: its class says which channel holds the bar and
 * whether it is a row or a column (4 classes); where the bar lies is drawn too.
 */
import { generator } from "../gpt/data.ts"

export const CLASSES = 4, CHANNELS = 2, SIZE = 8

/** One batch: images row-major [rows, 2, 8, 8] and their classes [rows]. */
export interface ImageBatch {
  readonly rows: number
  readonly x: number[]
  readonly y: number[]
}

/** `rows` images from `random`. */
export const makeImages = (random: () => number, rows: number): ImageBatch => {
  const x: number[] = [], y: number[] = []
  for (let r = 0; r < rows; r++) {
    const c = Math.floor(random() * CLASSES), at = Math.floor(random() * SIZE)
    const image = Array.from({ length: CHANNELS * SIZE * SIZE }, () => (random() - 0.5) * 0.6)
    const channel = c >> 1, row = (c & 1) === 0
    for (let i = 0; i < SIZE; i++) image[channel * SIZE * SIZE + (row ? at * SIZE + i : i * SIZE + at)]! += 1
    x.push(...image), y.push(c)
  }
  return { rows, x, y }
}

/** `n` batches of `rows` images from one seed. */
export const makeImageBatches = (seed: number, n: number, rows: number): ImageBatch[] => {
  const random = generator(seed)
  return Array.from({ length: n }, () => makeImages(random, rows))
}

/** The CNN's parameters as torch names them, with their shapes and initial draw. */
export const CNN_PARAMS: ReadonlyArray<{ readonly name: string; readonly shape: ReadonlyArray<number>; readonly init: "fanIn" | "ones" | "zeros"; readonly fanIn?: number }> = [
  // no bias before batch_norm, whose mean takes it out: its gradient would be rounding noise, which AdamW's step scales up
  { name: "conv1.weight", shape: [8, CHANNELS, 3, 3], init: "fanIn", fanIn: CHANNELS * 9 },
  { name: "bn1.weight", shape: [8], init: "ones" },
  { name: "bn1.bias", shape: [8], init: "zeros" },
  // groups 2: each output channel sees 4 of the 8 input channels
  { name: "conv2.weight", shape: [8, 4, 3, 3], init: "fanIn", fanIn: 4 * 9 },
  { name: "conv2.bias", shape: [8], init: "fanIn", fanIn: 4 * 9 },
  { name: "gn.weight", shape: [8], init: "ones" },
  { name: "gn.bias", shape: [8], init: "zeros" },
  { name: "fc.weight", shape: [CLASSES, 32], init: "fanIn", fanIn: 32 },
  { name: "fc.bias", shape: [CLASSES], init: "fanIn", fanIn: 32 },
]

/** Initial values by name: torch's default init for conv and linear (uniform within 1/sqrt(fan_in)), unit norm gains, zero norm biases. */
export const cnnWeights = (seed: number): Map<string, Float32Array> => {
  const random = generator(seed)
  return new Map(CNN_PARAMS.map((p) => {
    const data = new Float32Array(p.shape.reduce((a, b) => a * b, 1))
    if (p.init === "ones") data.fill(1)
    else if (p.init === "fanIn") for (let i = 0; i < data.length; i++) data[i] = (2 * random() - 1) / Math.sqrt(p.fanIn!)
    return [p.name, data]
  }))
}
