/* comm_checks.c: the argument checks of the communicator entry points, made once for Gloo
 * (c/cpu/comm_gloo.cc) and NCCL (c/cuda/comm_nccl.cu): the state of the comm, the tensors'
 * presence, dtypes and element counts for each collective, reduce ops, roots, peers, and the
 * address bytes exchanged at connect. Each check fails as its entry point, before any
 * transport is touched. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

int shim_check_comm_create(int32_t rank, int32_t size, int64_t timeout_ms) {
  const char *what = "shim_comm_create";
  if (size < 1) return shim_fail(SHIM_E_INVALID, "%s: size %d < 1", what, size);
  if (rank < 0 || rank >= size) return shim_fail(SHIM_E_INVALID, "%s: rank %d outside 0..%d", what, rank, size - 1);
  if (timeout_ms <= 0) return shim_fail(SHIM_E_INVALID, "%s: timeout %lld ms is not positive", what, (long long)timeout_ms);
  return SHIM_OK;
}

int shim_comm_copy_address(const void *bytes, int64_t n, uint8_t *buf, int64_t cap, int64_t *len) {
  SHIM_REQUIRE_IN("shim_comm_address", len, "len");
  *len = n;
  if (buf == NULL) return SHIM_OK; /* a size query */
  if (cap < n) return shim_fail(SHIM_E_INVALID, "shim_comm_address: capacity %lld < %lld bytes", (long long)cap, (long long)n);
  if (n > 0) memcpy(buf, bytes, (size_t)n);
  return SHIM_OK;
}

int shim_check_connect(const shim_comm_state *c, const uint8_t *addrs, const int64_t *lens, const void *own,
                       int64_t own_len, int64_t first_len, int64_t other_len) {
  const char *what = "shim_comm_connect";
  SHIM_REQUIRE_IN(what, lens, "lens");
  if (c->failure[0] != '\0')
    return shim_fail(SHIM_E_COMM, "%s: comm unusable after an earlier failure (%s)", what, c->failure);
  if (c->connected) return shim_fail(SHIM_E_INVALID, "%s: already connected", what);
  int64_t total = 0, own_offset = 0;
  for (int32_t i = 0; i < c->size; i++) {
    const int64_t expected = i == 0 ? first_len : other_len;
    if (lens[i] != expected)
      return shim_fail(SHIM_E_INVALID, "%s: member %d published %lld bytes, expected %lld", what, i, (long long)lens[i],
                       (long long)expected);
    if (i == c->rank) own_offset = total;
    total += lens[i];
  }
  if (total == 0) return SHIM_OK; /* nothing was published (one Gloo member): addrs may be NULL */
  SHIM_REQUIRE_IN(what, addrs, "addrs");
  if (own_len > 0 && memcmp(addrs + own_offset, own, (size_t)own_len) != 0)
    return shim_fail(SHIM_E_INVALID, "%s: the bytes at rank %d are not this member's address", what, c->rank);
  return SHIM_OK;
}

int shim_check_comm_usable(const char *fn, const shim_comm_state *c) {
  if (c == NULL) return shim_fail(SHIM_E_INVALID, "%s: comm is null", fn);
  if (c->failure[0] != '\0')
    return shim_fail(SHIM_E_COMM, "%s: comm unusable after an earlier failure (%s)", fn, c->failure);
  if (!c->connected) return shim_fail(SHIM_E_INVALID, "%s: comm is not connected yet", fn);
  return SHIM_OK;
}

/* A tensor handle a collective was given: there, and with memory behind any element. */
static int check_tensor(const char *fn, const shim_tensor *t, const char *name) {
  if (t == NULL || t->storage == NULL) return shim_fail(SHIM_E_INVALID, "%s: %s is null", fn, name);
  if (t->numel > 0 && t->storage->data == NULL) return shim_fail(SHIM_E_INVALID, "%s: %s has no memory", fn, name);
  SHIM_TRY(shim_require_contiguous(fn, t, name));
  return SHIM_OK;
}

/* The start of every collective with an out and an in: a usable comm, both tensors, one dtype. */
static int check_out_in(const char *fn, const shim_comm_state *c, const shim_tensor *out, const shim_tensor *in) {
  SHIM_TRY(shim_check_comm_usable(fn, c));
  SHIM_TRY(check_tensor(fn, out, "out"));
  SHIM_TRY(check_tensor(fn, in, "in"));
  if (out->dtype != in->dtype)
    return shim_fail(SHIM_E_INVALID, "%s: dtypes differ (out %s, in %s)", fn, shim_dtype_name(out->dtype),
                     shim_dtype_name(in->dtype));
  return SHIM_OK;
}

/* A reduce op both backends can apply to dtype (bool's sum and max are or, prod and min and). */
static int check_reduce_op(const char *fn, int32_t dtype, int32_t op) {
  if (op < SHIM_OP_SUM || op > SHIM_OP_AVG) return shim_fail(SHIM_E_INVALID, "%s: unknown reduce op %d", fn, op);
  if (dtype == SHIM_BOOL && op == SHIM_OP_AVG)
    return shim_fail(SHIM_E_UNSUPPORTED, "%s: avg is not defined for dtype %s", fn, shim_dtype_name(dtype));
  return SHIM_OK;
}

int shim_check_all_reduce(const shim_comm_state *c, const shim_tensor *out, const shim_tensor *in, int32_t op) {
  const char *what = "shim_all_reduce";
  SHIM_TRY(check_out_in(what, c, out, in));
  if (out->numel != in->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out has %lld elements, in %lld", what, (long long)out->numel, (long long)in->numel);
  SHIM_TRY(shim_check_no_partial_overlap(what, out, in, "in"));
  return check_reduce_op(what, in->dtype, op);
}

int shim_check_all_gather(const shim_comm_state *c, const shim_tensor *out, const shim_tensor *in) {
  const char *what = "shim_all_gather";
  SHIM_TRY(check_out_in(what, c, out, in));
  if (out->numel != in->numel * c->size)
    return shim_fail(SHIM_E_INVALID, "%s: out has %lld elements, not %d x %lld", what, (long long)out->numel, c->size,
                     (long long)in->numel);
  return SHIM_OK;
}

int shim_check_reduce_scatter(const shim_comm_state *c, const shim_tensor *out, const shim_tensor *in, int32_t op) {
  const char *what = "shim_reduce_scatter";
  SHIM_TRY(check_out_in(what, c, out, in));
  if (in->numel != out->numel * c->size)
    return shim_fail(SHIM_E_INVALID, "%s: in has %lld elements, not %d x %lld", what, (long long)in->numel, c->size,
                     (long long)out->numel);
  return check_reduce_op(what, in->dtype, op);
}

int shim_check_all_to_all(const shim_comm_state *c, const shim_tensor *out, const shim_tensor *in) {
  const char *what = "shim_all_to_all";
  SHIM_TRY(check_out_in(what, c, out, in));
  if (out->numel != in->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out has %lld elements, in %lld", what, (long long)out->numel, (long long)in->numel);
  if (in->numel % c->size != 0)
    return shim_fail(SHIM_E_INVALID, "%s: %lld elements do not split into %d chunks", what, (long long)in->numel, c->size);
  if (shim_tensors_overlap(in, out))
    return shim_fail(SHIM_E_INVALID, "%s: in and out share memory", what);
  return SHIM_OK;
}

int shim_check_broadcast(const shim_comm_state *c, const shim_tensor *t, int32_t root) {
  const char *what = "shim_broadcast";
  SHIM_TRY(shim_check_comm_usable(what, c));
  SHIM_TRY(check_tensor(what, t, "tensor"));
  if (root < 0 || root >= c->size) return shim_fail(SHIM_E_INVALID, "%s: root %d outside 0..%d", what, root, c->size - 1);
  return SHIM_OK;
}

int shim_check_p2p(const shim_comm_state *c, int32_t n, const int32_t *kinds, const int32_t *peers,
                   shim_tensor *const *tensors) {
  const char *what = "shim_p2p";
  SHIM_TRY(shim_check_comm_usable(what, c));
  if (n < 0) return shim_fail(SHIM_E_INVALID, "%s: n %d < 0", what, n);
  if (n == 0) return SHIM_OK;
  SHIM_REQUIRE_IN(what, kinds, "kinds");
  SHIM_REQUIRE_IN(what, peers, "peers");
  SHIM_REQUIRE_IN(what, tensors, "tensors");
  for (int32_t i = 0; i < n; i++) {
    if (kinds[i] != SHIM_SEND && kinds[i] != SHIM_RECV)
      return shim_fail(SHIM_E_INVALID, "%s: op %d has kind %d", what, i, kinds[i]);
    if (peers[i] < 0 || peers[i] >= c->size || peers[i] == c->rank)
      return shim_fail(SHIM_E_INVALID, "%s: op %d has peer %d (this member is %d of %d)", what, i, peers[i], c->rank,
                       c->size);
    SHIM_TRY(check_tensor(what, tensors[i], "a tensor"));
  }
  return SHIM_OK;
}

shim_comm_header shim_comm_header_of(int32_t call, const shim_tensor *t, int32_t arg) {
  shim_comm_header h;
  memset(&h, 0, sizeof h);
  h.magic = SHIM_COMM_HEADER_MAGIC;
  h.call = call;
  h.dtype = t->dtype;
  h.arg = arg;
  h.numel = t->numel;
  return h;
}

shim_comm_header shim_comm_refusal(int32_t call) {
  shim_comm_header h;
  memset(&h, 0, sizeof h);
  h.magic = SHIM_COMM_HEADER_MAGIC;
  h.call = call;
  h.refused = 1;
  return h;
}

static const char *call_name(int32_t call) {
  switch (call) {
    case SHIM_CALL_ALL_REDUCE: return "all_reduce";
    case SHIM_CALL_ALL_GATHER: return "all_gather";
    case SHIM_CALL_REDUCE_SCATTER: return "reduce_scatter";
    case SHIM_CALL_ALL_TO_ALL: return "all_to_all";
    case SHIM_CALL_BROADCAST: return "broadcast";
    case SHIM_CALL_SEND: return "send";
    case SHIM_CALL_RECV: return "recv";
    default: return "an unknown call";
  }
}

static const char *op_name(int32_t op) {
  static const char *const names[] = {"sum", "prod", "min", "max", "avg"};
  return op >= SHIM_OP_SUM && op <= SHIM_OP_AVG ? names[op] : "?";
}

/* "all_reduce (sum) of 1000 x f32" */
static void describe_header(const shim_comm_header *h, char *buf, size_t cap) {
  if (h->magic != SHIM_COMM_HEADER_MAGIC) {
    snprintf(buf, cap, "no valid header");
    return;
  }
  if (h->refused) {
    snprintf(buf, cap, "%s, refused on its own arguments", call_name(h->call));
    return;
  }
  char arg[32] = "";
  if (h->call == SHIM_CALL_ALL_REDUCE || h->call == SHIM_CALL_REDUCE_SCATTER) snprintf(arg, sizeof arg, " (%s)", op_name(h->arg));
  else if (h->call == SHIM_CALL_BROADCAST) snprintf(arg, sizeof arg, " (root %d)", h->arg);
  snprintf(buf, cap, "%s%s of %lld x %s", call_name(h->call), arg, (long long)h->numel, shim_dtype_name(h->dtype));
}

int shim_comm_headers_agree(const shim_comm_header *mine, const shim_comm_header *theirs) {
  /* A transfer's two sides name it differently (send, recv); what must agree is the rest. */
  const int32_t expected = mine->call == SHIM_CALL_SEND ? SHIM_CALL_RECV : mine->call == SHIM_CALL_RECV ? SHIM_CALL_SEND : mine->call;
  return theirs->magic == SHIM_COMM_HEADER_MAGIC && !theirs->refused && !mine->refused && theirs->call == expected &&
         theirs->dtype == mine->dtype &&
         theirs->numel == mine->numel && theirs->arg == mine->arg;
}

int shim_check_agreement(const char *fn, const shim_comm_header *mine, int32_t mine_rank, const shim_comm_header *theirs,
                         int32_t theirs_rank) {
  if (shim_comm_headers_agree(mine, theirs)) return SHIM_OK;
  char a[96], b[96];
  describe_header(mine, a, sizeof a);
  describe_header(theirs, b, sizeof b);
  return shim_fail(SHIM_E_INVALID, "%s: members disagree, nothing was transferred: member %d passed %s, member %d %s", fn,
                   mine_rank, a, theirs_rank, b);
}
