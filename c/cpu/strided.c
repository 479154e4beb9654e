/* strided.c: shim_copy_strided, shim_gather, shim_index_select and shim_cat on the cpu: element moves by index, with no
 * arithmetic, so elements move as opaque 1-, 2-, 4- or 8-byte words. And what lets the flat kernels take strided
 * tensors: gathering a strided tensor's elements into dense chunks and scattering them back (cpu.h). */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* n elements, dst stepping ds and src ss (in elements); contiguous runs are one memcpy. */
#define RUN(T)                                                                                  \
  do {                                                                                          \
    T *d = (T *)dst;                                                                            \
    const T *s = (const T *)src;                                                                \
    for (int64_t i = 0; i < n; i++) d[i * ds] = s[i * ss];                                      \
  } while (0)

static void run(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, int64_t size) {
  if (ds == 1 && ss == 1) {
    memcpy(dst, src, (size_t)(n * size));
    return;
  }
  switch (size) {
    case 1: RUN(uint8_t); break;
    case 2: RUN(uint16_t); break;
    case 4: RUN(uint32_t); break;
    default: RUN(uint64_t); break;
  }
}

/* Runs [begin, end) of the outer index (every dim but the last; a part of shim_cpu_parallel). */
typedef struct {
  char *d;
  const char *sp;
  const shim_strided_plan *p;
  int64_t size;
} copy_job;

static void copy_range(void *ctx, int64_t begin, int64_t end) {
  const copy_job *j = ctx;
  const shim_strided_plan *p = j->p;
  const int32_t k = p->ndim - 1;
  const int64_t n = p->shape[k], size = j->size;
  int64_t idx[SHIM_MAX_DIMS] = {0}, doff = p->dst_offset, soff = p->src_offset;
  for (int64_t rest = begin, d = k - 1; d >= 0; d--) { /* begin's index over the outer dims */
    idx[d] = rest % p->shape[d];
    rest /= p->shape[d];
    doff += idx[d] * p->dst_strides[d];
    soff += idx[d] * p->src_strides[d];
  }
  for (int64_t o = begin; o < end; o++) {
    run(j->d + doff * size, p->dst_strides[k], j->sp + soff * size, p->src_strides[k], n, size);
    for (int32_t d = k - 1; d >= 0; d--) { /* the next index of the outer dims, last fastest */
      doff += p->dst_strides[d];
      soff += p->src_strides[d];
      if (++idx[d] < p->shape[d]) break;
      doff -= p->dst_strides[d] * p->shape[d];
      soff -= p->src_strides[d] * p->shape[d];
      idx[d] = 0;
    }
  }
}

int shim_cpu_check_indices(const char *fn, const int64_t *ix, int64_t n, int64_t r, int32_t dim) {
  for (int64_t j = 0; j < n; j++)
    if (ix[j] < 0 || ix[j] >= r)
      return shim_fail(SHIM_E_INVALID, "%s: index %lld is out of range for dim %d of size %lld", fn, (long long)ix[j], dim, (long long)r);
  return SHIM_OK;
}

int shim_copy_strided(shim_tensor *dst, int64_t dst_offset, const int64_t *dst_strides, const shim_tensor *src,
                      int64_t src_offset, const int64_t *src_strides, int32_t ndim, const int64_t *shape, shim_stream *s) {
  shim_strided_plan p;
  SHIM_TRY(shim_check_copy_strided(dst, dst_offset, dst_strides, src, src_offset, src_strides, ndim, shape, &p));
  if (p.numel == 0) return SHIM_OK;
  const int64_t size = shim_dtype_size(dst->dtype);
  char *d = shim_cpu_data(dst);
  const char *sp = shim_cpu_data(src);
  if (p.ndim == 0) {
    memcpy(d + p.dst_offset * size, sp + p.src_offset * size, (size_t)size);
    return SHIM_OK;
  }
  copy_job job = {d, sp, &p, size};
  const int64_t n = p.shape[p.ndim - 1];
  shim_cpu_parallel(p.numel / n, SHIM_CPU_GRAIN / n + 1, copy_range, &job);
  return SHIM_OK;
}

int shim_gather(shim_tensor *out, const shim_tensor *a, int32_t dim, const shim_tensor *index, shim_stream *s) {
  SHIM_TRY(shim_check_gather(out, a, dim, index));
  const int64_t *ix = shim_cpu_data(index);
  const int64_t r = a->ndim > 0 ? a->shape[dim] : 1;
  SHIM_TRY(shim_cpu_check_indices("shim_gather", ix, index->numel, r, dim));
  const int32_t nd = a->ndim;
  int64_t stride[SHIM_MAX_DIMS], idx[SHIM_MAX_DIMS] = {0}, acc = 1;
  for (int32_t d = nd - 1; d >= 0; d--) {
    stride[d] = acc;
    acc *= a->shape[d];
  }
  const int64_t size = shim_dtype_size(a->dtype);
  char *o = shim_cpu_data(out);
  const char *src = shim_cpu_data(a);
  int64_t base = 0; /* a's offset of the current index in every dim but dim */
  for (int64_t e = 0; e < index->numel; e++) {
    const int64_t off = base + (nd > 0 ? ix[e] * stride[dim] : 0);
    memcpy(o + e * size, src + off * size, (size_t)size);
    for (int32_t d = nd - 1; d >= 0; d--) {
      if (d != dim) base += stride[d];
      if (++idx[d] < index->shape[d]) break;
      if (d != dim) base -= stride[d] * index->shape[d];
      idx[d] = 0;
    }
  }
  return SHIM_OK;
}

/* Picked slabs (a part of shim_cpu_parallel): slab k is entry k % n of outer index k / n, one memcpy
 * of inner elements each (a whole row for embedding). */
typedef struct {
  char *o;
  const char *src;
  const int64_t *ix;
  int64_t n, r;
  size_t slab;
} select_job;

static void select_range(void *ctx, int64_t begin, int64_t end) {
  const select_job *j = ctx;
  /* k = o * n + i, stepped without a division per slab */
  for (int64_t k = begin, o = begin / j->n, i = begin % j->n; k < end; k++) {
    memcpy(j->o + k * j->slab, j->src + (o * j->r + j->ix[i]) * j->slab, j->slab);
    if (++i == j->n) i = 0, o++;
  }
}

int shim_index_select(shim_tensor *out, const shim_tensor *a, int32_t dim, const shim_tensor *index, shim_stream *s) {
  shim_reduce_dims d;
  SHIM_TRY(shim_check_index_select(out, a, dim, index, &d));
  const int64_t *ix = shim_cpu_data(index), n = index->numel;
  SHIM_TRY(shim_cpu_check_indices("shim_index_select", ix, n, d.r, dim));
  select_job job = {shim_cpu_data(out), shim_cpu_data(a), ix, n, d.r, (size_t)(d.inner * shim_dtype_size(a->dtype))};
  shim_cpu_parallel(d.outer * n, (int64_t)(SHIM_CPU_GRAIN * 4 / (job.slab + 1)) + 1, select_range, &job);
  return SHIM_OK;
}

/* Rows [begin, end) of cat's outer index: each row of out is the parts' rows, one after another. */
typedef struct {
  char *o;
  const shim_tensor *const *parts;
  int32_t count, dim;
  int64_t row_bytes; /* out's */
  int64_t unit;      /* bytes per step along dim: inner x the element size */
} cat_job;

static void cat_range(void *ctx, int64_t begin, int64_t end) {
  const cat_job *j = ctx;
  for (int64_t r = begin; r < end; r++) {
    char *dst = j->o + r * j->row_bytes;
    for (int32_t k = 0; k < j->count; k++) {
      const int64_t bytes = j->parts[k]->shape[j->dim] * j->unit;
      memcpy(dst, (const char *)shim_cpu_data(j->parts[k]) + r * bytes, (size_t)bytes);
      dst += bytes;
    }
  }
}

int shim_cat(shim_tensor *out, int32_t count, const shim_tensor *const *parts, int32_t dim, shim_stream *s) {
  int64_t outer, inner;
  SHIM_TRY(shim_check_cat(out, count, parts, dim, &outer, &inner));
  const int64_t unit = inner * shim_dtype_size(out->dtype), row_bytes = out->shape[dim] * unit;
  if (row_bytes == 0) return SHIM_OK;
  cat_job job = {shim_cpu_data(out), parts, count, dim, row_bytes, unit};
  shim_cpu_parallel(outer, SHIM_CPU_GRAIN * 4 / row_bytes + 1, cat_range, &job);
  return SHIM_OK;
}

/* Walks elements [begin, begin + n) of t in row-major order, a run of its last dim at a time,
 * moving each run between t's memory and the dense buf (to_tensor: buf into t). */
static void walk(const shim_tensor *t, int64_t begin, int64_t n, char *buf, int to_tensor) {
  const int64_t size = shim_dtype_size(t->dtype);
  char *data = shim_cpu_data(t);
  if (t->ndim == 0) {
    if (n > 0) to_tensor ? memcpy(data, buf, (size_t)size) : memcpy(buf, data, (size_t)size);
    return;
  }
  const int32_t k = t->ndim - 1;
  int64_t idx[SHIM_MAX_DIMS], off = 0;
  for (int64_t rest = begin, d = k; d >= 0; d--) {
    idx[d] = rest % t->shape[d];
    rest /= t->shape[d];
    off += idx[d] * t->strides[d];
  }
  while (n > 0) {
    const int64_t m = shim_cpu_min64(n, t->shape[k] - idx[k]);
    if (to_tensor) run(data + off * size, t->strides[k], buf, 1, m, size);
    else run(buf, 1, data + off * size, t->strides[k], m, size);
    buf += m * size;
    n -= m;
    off += (m - 1) * t->strides[k];
    idx[k] += m - 1;
    for (int32_t d = k; d >= 0; d--) { /* the next index, last dim fastest */
      off += t->strides[d];
      if (++idx[d] < t->shape[d]) break;
      off -= t->strides[d] * t->shape[d];
      idx[d] = 0;
    }
  }
}

void shim_cpu_gather(const shim_tensor *t, int64_t begin, int64_t n, void *buf) { walk(t, begin, n, buf, 0); }

void shim_cpu_scatter(shim_tensor *t, int64_t begin, int64_t n, const void *buf) { walk(t, begin, n, (char *)buf, 1); }

void shim_cpu_header_over(shim_cpu_header *h, void *bytes, int32_t dtype, int32_t ndim, const int64_t *shape, int64_t numel) {
  memset(h, 0, sizeof *h);
  h->storage.data = bytes;
  h->storage.nbytes = numel * shim_dtype_size(dtype);
  h->storage.refs = 1;
  h->t.storage = &h->storage;
  h->t.dtype = dtype;
  h->t.ndim = ndim;
  if (ndim > 0) memcpy(h->t.shape, shape, (size_t)ndim * sizeof(int64_t));
  h->t.numel = numel;
  shim_contiguous_strides(ndim, shape, h->t.strides);
  h->t.contiguous = 1;
}

int shim_cpu_all_contiguous(const shim_tensor *t, int32_t count, const shim_tensor *const *in) {
  if (t != NULL && !t->contiguous) return 0;
  for (int32_t i = 0; i < count; i++)
    if (in[i] != NULL && !in[i]->contiguous) return 0;
  return 1;
}

enum { CHUNK = SHIM_CPU_CHUNK * 2, MAX_OPERANDS = 3 };

typedef struct {
  shim_tensor *out;
  int32_t count;
  const shim_tensor *const *in;
  shim_cpu_chunk_fn fn;
  void *ctx;
  int status; /* the first failure, changed atomically */
} chunked_job;

/* Elements [base, base + m) of an operand whose count (< the op's) repeats every t->numel. */
static void gather_repeating(const shim_tensor *t, int64_t base, int64_t m, char *buf) {
  const int64_t size = shim_dtype_size(t->dtype);
  while (m > 0) {
    const int64_t at = base % t->numel, take = shim_cpu_min64(m, t->numel - at);
    shim_cpu_gather(t, at, take, buf);
    buf += take * size, base += take, m -= take;
  }
}

/* A contiguous [m] header over elements base.. of t, which is contiguous. */
static void slice_header(shim_tensor *h, const shim_tensor *t, int64_t base, int64_t m) {
  *h = *t;
  h->offset = t->offset + base * shim_dtype_size(t->dtype);
  h->ndim = 1;
  h->shape[0] = m;
  h->strides[0] = 1;
  h->numel = m;
  h->contiguous = 1;
}

static void chunked_range(void *ctx, int64_t begin, int64_t end) {
  chunked_job *j = ctx;
  const int64_t n = j->out->numel;
  _Alignas(64) char bufs[MAX_OPERANDS + 1][CHUNK * 8];
  shim_cpu_header heads[MAX_OPERANDS + 1];
  shim_tensor slices[MAX_OPERANDS + 1];
  const shim_tensor *in[MAX_OPERANDS];
  for (int64_t c = begin; c < end; c++) {
    const int64_t base = c * CHUNK, m = shim_cpu_min64(CHUNK, n - base);
    for (int32_t i = 0; i < j->count; i++) {
      const shim_tensor *t = j->in[i];
      if (t->numel == 1) {
        in[i] = t;
      } else if (t->numel == n && t->contiguous) {
        slice_header(&slices[i], t, base, m);
        in[i] = &slices[i];
      } else {
        if (t->numel == n) shim_cpu_gather(t, base, m, bufs[i]);
        else gather_repeating(t, base, m, bufs[i]);
        shim_cpu_header_over(&heads[i], bufs[i], t->dtype, 1, &m, m);
        in[i] = &heads[i].t;
      }
    }
    shim_tensor *o;
    if (j->out->contiguous) {
      slice_header(&slices[MAX_OPERANDS], j->out, base, m);
      o = &slices[MAX_OPERANDS];
    } else {
      shim_cpu_header_over(&heads[MAX_OPERANDS], bufs[MAX_OPERANDS], j->out->dtype, 1, &m, m);
      o = &heads[MAX_OPERANDS].t;
    }
    int status = j->fn(j->ctx, o, in);
    if (status != SHIM_OK) {
      int expected = SHIM_OK;
      __atomic_compare_exchange_n(&j->status, &expected, status, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
      return;
    }
    if (!j->out->contiguous) shim_cpu_scatter(j->out, base, m, bufs[MAX_OPERANDS]);
  }
}

/* Whether t is dense in some order of its dims (torch's is_non_overlapping_and_dense). */
static int dense(const shim_tensor *t) {
  uint32_t used = 0;
  for (int64_t want = 1, left = t->numel; left > 1;) { /* the dim of the next stride up, each once */
    int32_t d = 0;
    while (d < t->ndim && ((used >> d & 1) || t->shape[d] < 2 || t->strides[d] != want)) d++;
    if (d == t->ndim) return 0;
    used |= 1u << d;
    want *= t->shape[d], left /= t->shape[d];
  }
  return 1;
}

/* Whether each operand is of one element or of out's shape (none repeats), and with `alike`, of out's strides too (size-1 dims aside). */
static int shaped_as(const shim_tensor *out, int32_t count, const shim_tensor *const *in, int alike) {
  for (int32_t i = 0; i < count; i++) {
    const shim_tensor *t = in[i];
    if (t->numel == 1) continue;
    if (t->ndim != out->ndim) return 0;
    for (int32_t d = 0; d < t->ndim; d++)
      if (t->shape[d] != out->shape[d] || (alike && t->shape[d] > 1 && t->strides[d] != out->strides[d])) return 0;
  }
  return 1;
}

/* t with its dims in `order`. */
static void permuted(shim_tensor *h, const shim_tensor *t, const int32_t *order) {
  *h = *t;
  for (int32_t d = 0; d < t->ndim; d++) h->shape[d] = t->shape[order[d]], h->strides[d] = t->strides[order[d]];
  h->contiguous = shim_strides_contiguous(h->ndim, h->shape, h->strides);
}

int shim_cpu_chunked(shim_tensor *out, int32_t count, const shim_tensor *const *in, shim_cpu_chunk_fn fn, void *ctx) {
  shim_tensor head_out, heads[MAX_OPERANDS];
  const shim_tensor *head_in[MAX_OPERANDS];
  if (out->numel > 1 && !out->contiguous && dense(out) && shaped_as(out, count, in, 0)) {
    if (shaped_as(out, count, in, 1)) { /* every one the same dense block: fn once, over them as flat arrays */
      slice_header(&head_out, out, 0, out->numel);
      for (int32_t i = 0; i < count; i++) {
        if (in[i]->numel == 1) head_in[i] = in[i];
        else slice_header(&heads[i], in[i], 0, in[i]->numel), head_in[i] = &heads[i];
      }
      return fn(ctx, &head_out, head_in);
    }
    /* The elements in out's memory order (its dims slowest first): out is written in place, an
     * operand laid out as it is read in place, only the others gathered. */
    int32_t order[SHIM_MAX_DIMS];
    for (int32_t d = 0; d < out->ndim; d++) {
      int32_t k = d;
      for (; k > 0 && out->strides[order[k - 1]] < out->strides[d]; k--) order[k] = order[k - 1];
      order[k] = d;
    }
    permuted(&head_out, out, order);
    for (int32_t i = 0; i < count; i++) {
      if (in[i]->numel == 1) head_in[i] = in[i];
      else permuted(&heads[i], in[i], order), head_in[i] = &heads[i];
    }
    out = &head_out, in = head_in;
  }
  chunked_job job = {out, count, in, fn, ctx, SHIM_OK};
  const int64_t chunks = (out->numel + CHUNK - 1) / CHUNK;
  shim_cpu_parallel(chunks, SHIM_CPU_GRAIN / CHUNK, chunked_range, &job);
  return job.status;
}

int shim_cpu_stage(const char *fn, const shim_tensor *t, int gather, shim_cpu_staged *st) {
  st->t = t;
  st->mem = NULL;
  st->bytes = 0;
  if (t == NULL || t->contiguous) return SHIM_OK;
  const int64_t bytes = t->numel * shim_dtype_size(t->dtype);
  SHIM_TRY(shim_memory_reserve(fn, bytes));
  st->mem = malloc((size_t)bytes + 1);
  if (st->mem == NULL) {
    shim_memory_release(bytes);
    return shim_fail(SHIM_E_NOMEM, "%s: out of host memory for a contiguous copy of %lld bytes", fn, (long long)bytes);
  }
  st->bytes = bytes;
  if (gather) shim_cpu_gather(t, 0, t->numel, st->mem);
  shim_cpu_header_over(&st->h, st->mem, t->dtype, t->ndim, t->shape, t->numel);
  st->t = &st->h.t;
  return SHIM_OK;
}

void shim_cpu_unstage(shim_cpu_staged *st, shim_tensor *target, int scatter) {
  if (st->mem == NULL) return;
  if (scatter) shim_cpu_scatter(target, 0, target->numel, st->mem);
  free(st->mem);
  shim_memory_release(st->bytes);
  st->mem = NULL;
}
