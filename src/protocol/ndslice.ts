/**
 * NDSlice: a set of ranks laid out as an n-dimensional array, `rank = offset + sum(coord[d] *
 * strides[d])` for every coordinate within `sizes`. Meshes and the from/to sets of SendTensor
 * are NDSlices. Index order is row-major over `sizes`.
 */
export class NDSlice {
  /**
   * Throws RangeError unless sizes and strides have the same length and offset, sizes and
   * strides are non-negative safe integers whose largest rank is a safe integer too (the
   * wire carries them as u64; ext.ts checks the same before constructing one).
   */
  constructor(
    readonly offset: number,
    readonly sizes: ReadonlyArray<number>,
    readonly strides: ReadonlyArray<number>,
  ) {
    const problem = NDSlice.problem(offset, sizes, strides)
    if (problem !== undefined) throw new RangeError(`NDSlice: ${problem}`)
  }

  /** Why these fields do not make an NDSlice, or undefined when they do. */
  static problem(offset: number, sizes: ReadonlyArray<number>, strides: ReadonlyArray<number>): string | undefined {
    if (sizes.length !== strides.length) return `${sizes.length} sizes but ${strides.length} strides`
    const natural = (n: number) => Number.isSafeInteger(n) && n >= 0
    if (!natural(offset)) return `offset ${offset} is not a non-negative safe integer`
    let last = offset
    for (let d = 0; d < sizes.length; d++) {
      const size = sizes[d]!, stride = strides[d]!
      if (!natural(size)) return `size ${size} of dim ${d} is not a non-negative safe integer`
      if (!natural(stride)) return `stride ${stride} of dim ${d} is not a non-negative safe integer`
      if (size > 0) last += (size - 1) * stride
    }
    return Number.isSafeInteger(last) ? undefined : `largest rank ${last} is not a safe integer`
  }

  /** A dense row-major slice of the given sizes starting at offset. */
  static contiguous(sizes: ReadonlyArray<number>, offset = 0): NDSlice {
    const strides = new Array<number>(sizes.length)
    let s = 1
    for (let d = sizes.length - 1; d >= 0; d--) { strides[d] = s; s *= sizes[d]! }
    return new NDSlice(offset, sizes, strides)
  }

  get ndim(): number { return this.sizes.length }

  /** Number of ranks in the slice (1 for a 0-dim slice: just `offset`). */
  get length(): number {
    let n = 1
    for (const s of this.sizes) n *= s
    return n
  }

  /** The rank at a row-major index (0 <= index < length). */
  rankAt(index: number): number {
    if (!Number.isInteger(index) || index < 0 || index >= this.length) throw new RangeError(`NDSlice: index ${index} out of range 0..${this.length - 1}`)
    let rank = this.offset
    for (let d = this.sizes.length - 1; d >= 0; d--) {
      const size = this.sizes[d]!
      rank += (index % size) * this.strides[d]!
      index = Math.floor(index / size)
    }
    return rank
  }

  /**
   * The coordinates of a rank, or undefined when the rank is not in the slice. When strides
   * make two coordinates land on one rank, the one found first (largest strides taking the
   * largest coordinates) is returned.
   */
  coordinates(rank: number): number[] | undefined {
    const rest = rank - this.offset
    if (!Number.isInteger(rest) || rest < 0 || this.length === 0) return undefined
    this.#lookup ??= makeLookup(this.sizes, this.strides)
    return this.#lookup(rest)
  }

  /** Built on the first lookup: the slice never changes. */
  #lookup: Lookup | undefined

  /** Row-major index of a rank, or -1 when the rank is not in the slice. */
  indexOf(rank: number): number {
    const coords = this.coordinates(rank)
    if (coords === undefined) return -1
    let index = 0
    for (let d = 0; d < coords.length; d++) index = index * this.sizes[d]! + coords[d]!
    return index
  }

  contains(rank: number): boolean {
    return this.coordinates(rank) !== undefined
  }

  /** The ranks that share every coordinate of `rank` but dimension `dim`, in order along it. */
  members(dim: number, rank: number): number[] {
    const coords = this.coordinates(rank)
    if (coords === undefined) throw new RangeError(`NDSlice: rank ${rank} is not in the slice`)
    if (!Number.isInteger(dim) || dim < 0 || dim >= this.ndim) throw new RangeError(`NDSlice: dim ${dim} out of range`)
    const stride = this.strides[dim]!, start = rank - stride * coords[dim]!
    return Array.from({ length: this.sizes[dim]! }, (_, i) => start + stride * i)
  }

  /** The rank at `coords`, one per dim; RangeError when one is outside its dim. */
  rankOf(coords: ReadonlyArray<number>): number {
    if (coords.length !== this.ndim) throw new RangeError(`NDSlice: ${coords.length} coordinates for ${this.ndim} dims`)
    let rank = this.offset
    for (let d = 0; d < coords.length; d++) rank += this.coordinate(d, coords[d]!) * this.strides[d]!
    return rank
  }

  /**
   * The sub-slice with each dim whose coordinate is given fixed there and removed, the others
   * kept in order; RangeError when a coordinate is outside its dim.
   */
  fix(coords: ReadonlyArray<number | undefined>): NDSlice {
    if (coords.length !== this.ndim) throw new RangeError(`NDSlice: ${coords.length} coordinates for ${this.ndim} dims`)
    let offset = this.offset
    const sizes: number[] = [], strides: number[] = []
    for (let d = 0; d < coords.length; d++) {
      const c = coords[d]
      if (c !== undefined) offset += this.coordinate(d, c) * this.strides[d]!
      else { sizes.push(this.sizes[d]!); strides.push(this.strides[d]!) }
    }
    return new NDSlice(offset, sizes, strides)
  }

  /** The same ranks as one dim, in the same order; RangeError unless the dims nest (row-major). */
  flatten(): NDSlice {
    const { sizes, strides } = this
    for (let d = 0; d + 1 < sizes.length; d++)
      if (strides[d] !== strides[d + 1]! * sizes[d + 1]!) throw new RangeError(`NDSlice: dims ${d} and ${d + 1} do not nest, so the slice does not flatten`)
    return new NDSlice(this.offset, [this.length], [strides.at(-1) ?? 1])
  }

  /** `c` when it is a coordinate of dim `d`; RangeError otherwise. */
  private coordinate(d: number, c: number): number {
    if (!Number.isInteger(c) || c < 0 || c >= this.sizes[d]!) throw new RangeError(`NDSlice: coordinate ${c} of dim ${d} is outside 0..${this.sizes[d]! - 1}`)
    return c
  }

  *[Symbol.iterator](): IterableIterator<number> {
    const n = this.length
    for (let i = 0; i < n; i++) yield this.rankAt(i)
  }

  toString(): string {
    return `NDSlice(offset=${this.offset}, sizes=[${this.sizes}], strides=[${this.strides}])`
  }
}

/** Coordinates of `rest` = rank - offset (a non-negative integer), or undefined. */
type Lookup = (rest: number) => number[] | undefined

/** A non-nesting slice with more coordinates than this is searched per lookup, not indexed. */
const MAX_INDEXED = 1 << 18

/**
 * How a slice finds coordinates, chosen once per slice. Dims that can move a rank (size > 1,
 * stride > 0) are taken largest stride first. When strides nest (each above the reach of
 * all smaller ones, as in every contiguous or sub-sliced mesh) a rank splits one way only:
 * O(ndim) division. Otherwise an index of every rank, filled in the search order so ties
 * resolve as documented; and past MAX_INDEXED coordinates a depth-first search that
 * remembers the dead ends, so it is polynomial, not exponential.
 */
const makeLookup = (sizes: ReadonlyArray<number>, strides: ReadonlyArray<number>): Lookup => {
  const ndim = sizes.length
  // Read through sizes and strides, not copies: the tests count the reads as steps.
  const dims = [...Array(ndim).keys()].filter((d) => sizes[d]! > 1 && strides[d]! > 0).sort((a, b) => strides[b]! - strides[a]!)
  const size = (i: number) => sizes[dims[i]!]!, stride = (i: number) => strides[dims[i]!]!
  // reach[i]: the largest sum the dims i.. can add.
  const reach = new Array<number>(dims.length + 1).fill(0)
  for (let i = dims.length - 1; i >= 0; i--) reach[i] = reach[i + 1]! + (size(i) - 1) * stride(i)
  const coordsOf = (digits: ArrayLike<number>): number[] => {
    const coords = new Array<number>(ndim).fill(0)
    for (let i = 0; i < dims.length; i++) coords[dims[i]!] = digits[i]!
    return coords
  }

  if (dims.every((_, i) => stride(i) > reach[i + 1]!)) {
    return (rest) => {
      const digits = new Array<number>(dims.length)
      for (let i = 0; i < dims.length; i++) {
        const c = Math.floor(rest / stride(i))
        if (c >= size(i)) return undefined
        digits[i] = c
        rest -= c * stride(i)
      }
      return rest === 0 ? coordsOf(digits) : undefined
    }
  }

  if (dims.reduce((n, _, i) => n * size(i), 1) <= MAX_INDEXED) {
    // Every coordinate in search order (dims in order, each counting down); the first to
    // reach a rank is the one the documented rule picks.
    const index = new Map<number, number[]>()
    const digits = dims.map((_, i) => size(i) - 1)
    let sum = reach[0]!
    while (true) {
      if (!index.has(sum)) index.set(sum, coordsOf(digits))
      let i = dims.length - 1
      while (i >= 0 && digits[i] === 0) { digits[i] = size(i) - 1; sum += (size(i) - 1) * stride(i); i-- }
      if (i < 0) break
      digits[i]!--
      sum -= stride(i)
    }
    return (rest) => index.get(rest)?.slice()
  }

  return (rest) => {
    const digits = new Array<number>(dims.length).fill(0)
    // dead[i]: sums the dims i.. cannot make.
    const dead = dims.map(() => new Set<number>())
    const search = (i: number, left: number): boolean => {
      if (i === dims.length) return left === 0
      if (left > reach[i]! || dead[i]!.has(left)) return false
      for (let c = Math.min(Math.floor(left / stride(i)), size(i) - 1); c >= 0; c--) {
        if (left - c * stride(i) > reach[i + 1]!) break
        digits[i] = c
        if (search(i + 1, left - c * stride(i))) return true
      }
      dead[i]!.add(left)
      return false
    }
    return search(0, rest) ? coordsOf(digits) : undefined
  }
}
