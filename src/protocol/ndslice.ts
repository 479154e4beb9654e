/**
 * NDSlice: a set of ranks laid out as an n-dimensional array, `rank = offset + sum(coord[d] *
 * strides[d])` for every coordinate within `sizes`. Meshes and the from/to sets of SendTensor
 * are NDSlices. Index order is row-major over `sizes`.
 */
export class NDSlice {
  constructor(
    readonly offset: number,
    readonly sizes: ReadonlyArray<number>,
    readonly strides: ReadonlyArray<number>,
  ) {
    if (sizes.length !== strides.length) throw new RangeError(`NDSlice: ${sizes.length} sizes but ${strides.length} strides`)
  }

  /** A dense row-major slice of the given sizes starting at offset. */
  static contiguous(sizes: ReadonlyArray<number>, offset = 0): NDSlice {
    const strides = new Array<number>(sizes.length)
    let s = 1
    for (let d = sizes.length - 1; d >= 0; d--) { strides[d] = s; s *= sizes[d]! }
    return new NDSlice(offset, sizes, strides)
  }

  get ndim(): number { return this.sizes.length }

  /** Number of ranks in the slice. */
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

  /** The coordinates of a rank, or undefined when the rank is not in the slice. */
  coordinates(rank: number): number[] | undefined {
    let rest = rank - this.offset
    if (!Number.isInteger(rest) || rest < 0 || this.length === 0) return undefined
    const coords = new Array<number>(this.ndim).fill(0)
    // Peel off the largest strides first; a size-1 dim always has coordinate 0.
    const order = [...this.sizes.keys()].filter((d) => this.sizes[d]! > 1).sort((a, b) => this.strides[b]! - this.strides[a]!)
    for (const d of order) {
      const stride = this.strides[d]!
      const c = stride === 0 ? 0 : Math.min(Math.floor(rest / stride), this.sizes[d]! - 1)
      coords[d] = c
      rest -= c * stride
    }
    return rest === 0 ? coords : undefined
  }

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

  *[Symbol.iterator](): IterableIterator<number> {
    const n = this.length
    for (let i = 0; i < n; i++) yield this.rankAt(i)
  }

  toString(): string {
    return `NDSlice(offset=${this.offset}, sizes=[${this.sizes}], strides=[${this.strides}])`
  }
}
