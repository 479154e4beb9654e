// comm_gloo.cc: the communicator section of shim.h on Gloo's tcp transport.
//
// Creation is two-phase: shim_comm_create makes a device, a context and one pair per peer and
// keeps the pairs' addresses for the caller to publish; shim_comm_connect connects each pair
// to the slot of its peer's bytes that addresses this rank. Every C++ exception stops at the
// entry points below. A failure inside Gloo leaves its pairs in an unknown state, so the comm
// remembers it and refuses later work with that first error.
//
// All-reduce takes one of three paths, the same on every member: through shared memory when
// every member runs on this host (comm_shm.h); else, for small inputs, the "exchange" below;
// else Gloo's ring. Each address slot therefore also says where this member's shared segment
// is, and connect ends with an all-reduce that agrees on whether every member mapped them all.
//
// Before any data moves, the members agree on what each passed (internal.h, shim_comm_header):
// the shared-memory path and the exchange carry the header with their first round; the other
// collectives exchange headers alone first; a transfer's sender and receiver swap theirs. A
// disagreement fails the call on every member with the comm still usable, and Gloo, whose own
// threads abort the process on a size it did not expect, never sees one.
#include <netdb.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "../common/internal.h"
#include "comm_gloo_reduce.h"
#include "comm_shm.h"

using std::chrono::milliseconds;

namespace {

// A gloo::Context whose pairs the caller creates, and later connects, itself (Gloo's own
// rendezvous would open a store connection; here the bytes travel through ours).
class TwoPhaseContext : public gloo::Context {
 public:
  TwoPhaseContext(int rank, int size, std::shared_ptr<gloo::transport::Device> device, milliseconds timeout)
      : gloo::Context(rank, size) {
    setTimeout(timeout);
    device_ = std::move(device);
    transportContext_ = device_->createContext(rank, size);
  }

  // One pair per peer; each pair's address followed by `suffix`, end to end in increasing
  // peer order.
  std::vector<char> createPairs(const std::vector<char> &suffix) {
    // A pair waits five times its own timeout for its connection, so pairs get a fifth of
    // ours (rounded up) and connect keeps within it; async pairs use it for nothing else.
    transportContext_->setTimeout((getTimeout() + milliseconds(4)) / 5);
    std::vector<char> bytes;
    for (int peer = 0; peer < size; peer++) {
      if (peer == rank) continue;
      std::vector<char> address = transportContext_->createPair(peer)->address().bytes();
      bytes.insert(bytes.end(), address.begin(), address.end());
      bytes.insert(bytes.end(), suffix.begin(), suffix.end());
    }
    transportContext_->setTimeout(getTimeout());
    return bytes;
  }

  void connectPair(int peer, const std::vector<char> &address) { transportContext_->getPair(peer)->connect(address); }
};

// p2p slots: a top byte no collective uses (they take 1..8), the direction, and how many
// transfers in that direction this pair has issued before; sender and receiver count the
// same transfers, so they compute the same slot.
constexpr uint64_t kP2PSlotPrefix = uint64_t{0x10} << 56;
constexpr uint64_t kP2PSequenceMask = (uint64_t{1} << 55) - 1;

uint64_t p2p_slot(uint64_t prefix, int32_t src, int32_t dst, uint64_t sequence) {
  return prefix | (uint64_t{src > dst} << 55) | (sequence & kP2PSequenceMask);
}

// The exchange: every member sends one message to every peer, its header and then up to
// `capacity` bytes of payload, and receives theirs. With no payload it is how the members agree
// before a collective; with its input as payload it is a whole all-reduce, for members on
// several hosts: an all-reduce of at most kExchangeBytes (all peers' contributions together)
// sends this member's whole input to every peer and reduces what arrives locally, in rank
// order, so every member computes the same bits. Gloo's ring
// needs 2(n-1) dependent steps, each a receive-ready notice and then the data, and each hop
// costs tens of microseconds on a busy machine. Here the receives for the next exchange are
// posted as soon as the current one has arrived, so a member's sends find the peers ready and
// go out at once: one hop per all-reduce. The bytes sent are (n-1) x input (the ring's are
// 2(n-1)/n x input), which is why only small inputs take this path. Two scratch halves
// alternate, so the next exchange's receives can land while this one is being reduced.
constexpr size_t kExchangeBytes = 256 * 1024;
constexpr uint64_t kExchangeSlotPrefix = uint64_t{0x11} << 56;
constexpr uint64_t kExchangeSequenceMask = (uint64_t{1} << 56) - 1;
// A message's header takes this much, so that its payload stays 64-byte aligned.
constexpr size_t kHeaderBytes = 64;
static_assert(sizeof(shim_comm_header) <= kHeaderBytes, "a header fits its place");

// A transfer's sender and receiver swap headers on slots of their own (prefixes no collective,
// p2p data or exchange uses), counted like its data.
constexpr uint64_t kSenderHeaderPrefix = uint64_t{0x12} << 56;
constexpr uint64_t kReceiverHeaderPrefix = uint64_t{0x13} << 56;

struct Exchange {
  size_t capacity = 0;  // payload bytes per member in each half of the scratch
  size_t stride() const { return kHeaderBytes + capacity; }
  std::array<std::unique_ptr<uint8_t[]>, 2> scratch;  // size x stride each; slot r holds member r's message
  std::array<std::unique_ptr<gloo::transport::UnboundBuffer>, 2> inbox;  // over each half
  std::unique_ptr<uint8_t[]> message;  // this member's outgoing message (stride bytes)
  std::unique_ptr<gloo::transport::UnboundBuffer> outbox;  // over it
  uint64_t sequence = 0;  // exchanges begun, the same on every member
  bool posted = false;    // whether the receives for `sequence` are posted
  // Why posting the next exchange's receives failed. That exchange reports it: the one that
  // had just completed is whole, and its peers may already have closed their pairs.
  std::exception_ptr postFailure;
};

}  // namespace

// rank, size, connected and the first transport failure are in shim_comm_state (internal.h),
// zeroed by make_unique's value-initialisation.
struct shim_comm : shim_comm_state {
  milliseconds timeout{0};
  std::shared_ptr<TwoPhaseContext> context;
  std::vector<char> address;  // what shim_comm_address hands out
  uint32_t tag = 0;     // collective sequence number, the same on every member
  std::vector<uint64_t> sent, received;  // p2p transfers issued per peer, in each direction
  // Declared after `context`, so its buffers (and any receives still posted) go first.
  std::unique_ptr<Exchange> exchange;  // made on the first collective
  // This member's shared segment and its view of the others' (null for a one-member comm);
  // shm_ready once every member has mapped every segment.
  std::unique_ptr<ShmGroup> shm;
  bool shm_ready = false;
};

namespace {

// Gloo tells a timeout from other failures only in its text ("Timed out waiting ...",
// "Connect timeout ...", "Read timeout ...").
bool is_timeout(std::string text) {
  for (char &ch : text) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
  return text.find("timed out") != std::string::npos || text.find("timeout") != std::string::npos;
}

// Runs body, turning any exception into a status.
template <typename Body>
int guarded(shim_comm *c, const char *what, Body body) {
  int code = SHIM_E_COMM;
  std::string message;
  try {
    return body();
  } catch (const std::bad_alloc &) {
    code = SHIM_E_NOMEM;
    message = "out of memory";
  } catch (const std::exception &e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  if (code == SHIM_E_COMM && is_timeout(message)) code = SHIM_E_TIMEOUT;
  if (c != nullptr && c->failure[0] == '\0') snprintf(c->failure, sizeof c->failure, "%s: %s", what, message.c_str());
  if (c != nullptr && c->shm_ready) c->shm->fail();
  return shim_fail(code, "%s: %s", what, message.c_str());
}

// Every collective's options: the next tag (the same on every member) and the comm's timeout.
template <typename Options>
void set_tag_and_timeout(shim_comm *c, Options &opts) {
  opts.setTag(c->tag++);
  opts.setTimeout(c->timeout);
}

void *data(const shim_tensor *t) { return shim_tensor_data(t); }
size_t nbytes(const shim_tensor *t) { return static_cast<size_t>(t->numel * shim_dtype_size(t->dtype)); }

// Gloo splits the allreduce into segments of whole elements, so it is told the element size
// through T; the arithmetic itself is fn's.
template <typename T>
void allreduce_as(shim_comm *c, void *out, const void *in, size_t n, shim_reduce_fn fn) {
  gloo::AllreduceOptions opts(c->context);
  if (in != out) opts.setInput(static_cast<T *>(const_cast<void *>(in)), n);
  opts.setOutput(static_cast<T *>(out), n);
  opts.setReduceFunction(fn);
  set_tag_and_timeout(c, opts);
  gloo::allreduce(opts);
}

// Waits for one posted transfer, within what is left of the call's deadline.
void wait_transfer(gloo::transport::UnboundBuffer &buffer, bool send, std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
  left = std::max(left, milliseconds(1));  // to Gloo, 0 means no limit and -1 its default
  bool done = send ? buffer.waitSend(left) : buffer.waitRecv(left);
  if (!done) throw std::runtime_error("transfer aborted");
}

size_t exchange_capacity(const shim_comm *c) {
  return kExchangeBytes / static_cast<size_t>(c->size - 1) / 64 * 64;
}

// Posts the receives of exchange `sequence`: one per peer, into its slot of that half.
void post_exchange(shim_comm *c, Exchange &x) {
  const uint64_t slot = kExchangeSlotPrefix | (x.sequence & kExchangeSequenceMask);
  gloo::transport::UnboundBuffer &inbox = *x.inbox[x.sequence & 1];
  for (int32_t peer = 0; peer < c->size; peer++)
    if (peer != c->rank) inbox.recv(peer, slot, static_cast<size_t>(peer) * x.stride(), x.stride());
  x.posted = true;
}

Exchange &exchange_of(shim_comm *c) {
  if (!c->exchange) {
    auto x = std::make_unique<Exchange>();
    x->capacity = exchange_capacity(c);
    for (int half = 0; half < 2; half++) {
      x->scratch[half].reset(new uint8_t[static_cast<size_t>(c->size) * x->stride()]);
      x->inbox[half] = c->context->createUnboundBuffer(x->scratch[half].get(), static_cast<size_t>(c->size) * x->stride());
    }
    x->message.reset(new uint8_t[x->stride()]);
    x->outbox = c->context->createUnboundBuffer(x->message.get(), x->stride());
    c->exchange = std::move(x);
  }
  return *c->exchange;
}

// One exchange: `mine` and `bytes` (at most the capacity) of payload to every peer, and every
// peer's message into *arrived (member r's at r x stride, its payload kHeaderBytes in). Fails
// as fn, on every member alike, when a peer's header is not `mine`; then no payload is read.
int exchange(shim_comm *c, const char *fn, const shim_comm_header &mine, const void *payload, size_t bytes,
             const uint8_t **arrived) {
  Exchange &x = exchange_of(c);
  if (x.postFailure) std::rethrow_exception(x.postFailure);
  const auto deadline = std::chrono::steady_clock::now() + c->timeout;
  if (!x.posted) post_exchange(c, x);
  const uint64_t slot = kExchangeSlotPrefix | (x.sequence & kExchangeSequenceMask);
  const uint8_t *half = x.scratch[x.sequence & 1].get();
  gloo::transport::UnboundBuffer &inbox = *x.inbox[x.sequence & 1];

  memcpy(x.message.get(), &mine, sizeof mine);
  if (bytes > 0) memcpy(x.message.get() + kHeaderBytes, payload, bytes);
  for (int32_t peer = 0; peer < c->size; peer++)
    if (peer != c->rank) x.outbox->send(peer, slot, 0, kHeaderBytes + bytes);
  for (int32_t i = 1; i < c->size; i++) wait_transfer(inbox, false, deadline);
  x.sequence++;
  x.posted = false;
  try {
    post_exchange(c, x);
  } catch (...) {
    x.postFailure = std::current_exception();
  }
  for (int32_t i = 1; i < c->size; i++) wait_transfer(*x.outbox, true, deadline);
  for (int32_t peer = 0; peer < c->size; peer++) {
    if (peer == c->rank) continue;
    shim_comm_header theirs;
    memcpy(&theirs, half + static_cast<size_t>(peer) * x.stride(), sizeof theirs);
    SHIM_TRY(shim_check_agreement(fn, &mine, c->rank, &theirs, peer));
  }
  *arrived = half;
  return SHIM_OK;
}

// The agreement before a collective that moves its data some other way.
int agree_on(shim_comm *c, const char *fn, const shim_comm_header &mine) {
  if (c->size == 1) return SHIM_OK;
  const uint8_t *arrived;
  return exchange(c, fn, mine, nullptr, 0, &arrived);
}

// The all-reduce as one exchange of every member's whole input (bytes <= capacity).
int allreduce_by_exchange(shim_comm *c, const char *fn, const shim_comm_header &mine, void *out, const void *in, size_t n,
                          size_t bytes, shim_reduce_fn fn_reduce) {
  const uint8_t *arrived;
  SHIM_TRY(exchange(c, fn, mine, in, bytes, &arrived));
  // This member's own input is read from its outgoing message, a copy: out may be in.
  const size_t stride = c->exchange->stride();
  auto from = [&](int32_t r) -> const void * {
    return r == c->rank ? c->exchange->message.get() + kHeaderBytes : arrived + static_cast<size_t>(r) * stride + kHeaderBytes;
  };
  fn_reduce(out, from(0), from(1), n);
  for (int32_t r = 2; r < c->size; r++) fn_reduce(out, out, from(r), n);
  return SHIM_OK;
}

// Whether `mine` holds on every member: the shared-memory path is taken by all or by none.
bool agree(shim_comm *c, bool mine) {
  uint8_t all = mine ? 1 : 0;
  gloo::AllreduceOptions opts(c->context);
  opts.setOutput(&all, 1);
  opts.setReduceFunction([](void *out, const void *a, const void *b, size_t n) {
    for (size_t i = 0; i < n; i++) static_cast<uint8_t *>(out)[i] = std::min(static_cast<const uint8_t *>(a)[i], static_cast<const uint8_t *>(b)[i]);
  });
  set_tag_and_timeout(c, opts);
  gloo::allreduce(opts);
  return all == 1;
}

// The all-reduce on whichever path every member takes, after agreeing on `mine`.
int allreduce(shim_comm *c, const char *fn, const shim_comm_header &mine, void *out, const void *in, size_t n,
              int64_t element_size, shim_reduce_fn reduce) {
  const size_t bytes = n * static_cast<size_t>(element_size);
  if (c->size == 1) {
    if (out != in && bytes > 0) memcpy(out, in, bytes);
    return SHIM_OK;
  }
  if (c->shm_ready) {
    shim_comm_header theirs;
    const int other = c->shm->allreduce(out, in, bytes, static_cast<size_t>(element_size), reduce,
                                        std::chrono::steady_clock::now() + c->timeout, mine, &theirs);
    return other < 0 ? SHIM_OK : shim_check_agreement(fn, &mine, c->rank, &theirs, other);
  }
  if (bytes <= exchange_capacity(c)) return allreduce_by_exchange(c, fn, mine, out, in, n, bytes, reduce);
  SHIM_TRY(agree_on(c, fn, mine));
  switch (element_size) {
    case 1: allreduce_as<uint8_t>(c, out, in, n, reduce); break;
    case 2: allreduce_as<uint16_t>(c, out, in, n, reduce); break;
    case 4: allreduce_as<uint32_t>(c, out, in, n, reduce); break;
    default: allreduce_as<uint64_t>(c, out, in, n, reduce); break;
  }
  return SHIM_OK;
}

// A call this member refuses on its own arguments, once its comm is usable: it still takes
// part in the agreement, on the path the others take, saying it refuses, so that they fail the
// call too instead of waiting for it. What it reports is its own refusal.
int refused(shim_comm *c, const char *fn, int32_t call, int status) {
  if (status == SHIM_OK || c == nullptr || c->size == 1 || !c->connected || c->failure[0] != '\0') return status;
  const std::string why = shim_last_error();
  const shim_comm_header mine = shim_comm_refusal(call);
  (void)guarded(c, fn, [&]() -> int {
    if (call != SHIM_CALL_ALL_REDUCE && call != SHIM_CALL_REDUCE_SCATTER) return agree_on(c, fn, mine);
    uint8_t nothing = 0;  // no header agrees with a refusal, so nothing is reduced
    return allreduce(c, fn, mine, &nothing, &nothing, 0, 1, shim_comm_reduce_fn(SHIM_U8, SHIM_OP_SUM));
  });
  return shim_fail(status, "%s", why.c_str());
}

// shim_set_comm_shm's setting: whether new comms on one host use the shared-memory rounds.
std::atomic<bool> comm_shm{true};

}  // namespace

extern "C" {

int shim_set_comm_shm(int32_t enabled) {
  SHIM_TRY(shim_check_flag("shim_set_comm_shm", enabled));
  comm_shm = enabled == 1;
  return SHIM_OK;
}

int shim_comm_create(int32_t rank, int32_t size, int64_t timeout_ms, const char *hostname, shim_comm **out) {
  const char *what = "shim_comm_create";
  SHIM_REQUIRE(out, "out");
  SHIM_REQUIRE(hostname, "hostname");
  SHIM_TRY(shim_check_comm_create(rank, size, timeout_ms));
  const char *host = hostname[0] != '\0' ? hostname : "127.0.0.1";
  // This Gloo checks getaddrinfo's result against -1 only and then walks an unset list when a
  // name does not resolve (a crash), so the name is resolved here first.
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (int rv = getaddrinfo(host, nullptr, &hints, &found); rv != 0)
    return shim_fail(SHIM_E_COMM, "%s: cannot resolve %s: %s", what, host, gai_strerror(rv));
  freeaddrinfo(found);
  return guarded(nullptr, what, [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    auto comm = std::make_unique<shim_comm>();
    comm->rank = rank;
    comm->size = size;
    comm->timeout = milliseconds(timeout_ms);
    comm->context = std::make_shared<TwoPhaseContext>(rank, size, gloo::transport::tcp::CreateDevice(attr), comm->timeout);
    // Each slot of the address is a pair's address and then where this member's segment is.
    std::vector<char> segment;
    if (size > 1) {
      // shim_set_comm_shm(0) keeps every collective on TCP (as between hosts).
      comm->shm = std::make_unique<ShmGroup>(rank, size, comm_shm.load());
      segment.resize(ShmGroup::kPublishedBytes);
      comm->shm->publish(segment.data());
    }
    comm->address = comm->context->createPairs(segment);
    comm->sent.assign(size, 0);
    comm->received.assign(size, 0);
    *out = comm.release();
    return SHIM_OK;
  });
}

int shim_comm_address(shim_comm *c, uint8_t *buf, int64_t cap, int64_t *len) {
  SHIM_REQUIRE(c, "comm");
  return shim_comm_copy_address(c->address.data(), static_cast<int64_t>(c->address.size()), buf, cap, len);
}

// Every member publishes one equal-length slot per peer; ours must be what we published.
int shim_comm_connect(shim_comm *c, const uint8_t *addrs, const int64_t *lens) {
  SHIM_REQUIRE(c, "comm");
  const int64_t published = static_cast<int64_t>(c->address.size());
  SHIM_TRY(shim_check_connect(c, addrs, lens, c->address.data(), published, published, published));
  if (c->size == 1) {
    c->connected = true;
    return SHIM_OK;
  }
  const size_t slot = c->address.size() / static_cast<size_t>(c->size - 1);
  const size_t pairBytes = slot - ShmGroup::kPublishedBytes;
  return guarded(c, "shim_comm_connect", [&] {
    std::vector<const char *> segments(c->size);
    for (int32_t peer = 0; peer < c->size; peer++) {
      // peer's slots skip peer itself, so ours is at index rank below it and rank - 1 above.
      const int32_t index = peer == c->rank ? 0 : c->rank < peer ? c->rank : c->rank - 1;
      const char *start = reinterpret_cast<const char *>(addrs) + static_cast<size_t>(peer) * c->address.size() +
                          static_cast<size_t>(index) * slot;
      segments[peer] = start + pairBytes;
      if (peer != c->rank) c->context->connectPair(peer, std::vector<char>(start, start + pairBytes));
    }
    c->shm_ready = agree(c, c->shm->attach(segments));
    c->shm->closeDescriptor();
    c->connected = true;
    return SHIM_OK;
  });
}

const char *shim_comm_transport(const shim_comm *c) {
  if (c == nullptr || !c->connected) return "";
  if (c->size == 1) return "self";
  return c->shm_ready ? "shm+tcp" : "tcp";
}

int shim_comm_destroy(shim_comm *c) {
  SHIM_REQUIRE(c, "comm");
  return guarded(nullptr, "shim_comm_destroy", [&] {
    delete c;
    return SHIM_OK;
  });
}

int shim_all_reduce(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op, shim_stream *s) {
  const char *what = "shim_all_reduce";
  SHIM_TRY(refused(c, what, SHIM_CALL_ALL_REDUCE, shim_check_all_reduce(c, out, in, op)));
  const shim_reduce_fn fn = shim_comm_reduce_fn(in->dtype, op);
  return guarded(c, what, [&]() -> int {
    SHIM_TRY(allreduce(c, what, shim_comm_header_of(SHIM_CALL_ALL_REDUCE, in, op), data(out), data(in),
                       static_cast<size_t>(in->numel), shim_dtype_size(in->dtype), fn));
    if (op == SHIM_OP_AVG) shim_comm_divide(out->dtype, data(out), static_cast<size_t>(out->numel), c->size);
    return SHIM_OK;
  });
}

int shim_all_gather(shim_comm *c, shim_tensor *out, const shim_tensor *in, shim_stream *s) {
  const char *what = "shim_all_gather";
  SHIM_TRY(refused(c, what, SHIM_CALL_ALL_GATHER, shim_check_all_gather(c, out, in)));
  return guarded(c, what, [&]() -> int {
    SHIM_TRY(agree_on(c, what, shim_comm_header_of(SHIM_CALL_ALL_GATHER, in, 0)));
    if (in->numel == 0) return SHIM_OK;
    gloo::AllgatherOptions opts(c->context);
    opts.setInput(static_cast<uint8_t *>(data(in)), nbytes(in));
    opts.setOutput(static_cast<uint8_t *>(data(out)), nbytes(out));
    set_tag_and_timeout(c, opts);
    gloo::allgather(opts);
    return SHIM_OK;
  });
}

// This Gloo has no options-style reduce-scatter: all-reduce into scratch, keep our chunk.
int shim_reduce_scatter(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op, shim_stream *s) {
  const char *what = "shim_reduce_scatter";
  SHIM_TRY(refused(c, what, SHIM_CALL_REDUCE_SCATTER, shim_check_reduce_scatter(c, out, in, op)));
  const shim_reduce_fn fn = shim_comm_reduce_fn(in->dtype, op);
  std::unique_ptr<uint8_t[]> scratch(new (std::nothrow) uint8_t[std::max<size_t>(nbytes(in), 1)]);
  if (!scratch) return shim_fail(SHIM_E_NOMEM, "%s: no memory for a %zu-byte scratch buffer", what, nbytes(in));
  return guarded(c, what, [&]() -> int {
    SHIM_TRY(allreduce(c, what, shim_comm_header_of(SHIM_CALL_REDUCE_SCATTER, in, op), scratch.get(), data(in),
                       static_cast<size_t>(in->numel), shim_dtype_size(in->dtype), fn));
    if (in->numel == 0) return SHIM_OK;
    memcpy(data(out), scratch.get() + static_cast<size_t>(c->rank) * nbytes(out), nbytes(out));
    if (op == SHIM_OP_AVG) shim_comm_divide(out->dtype, data(out), static_cast<size_t>(out->numel), c->size);
    return SHIM_OK;
  });
}

int shim_all_to_all(shim_comm *c, shim_tensor *out, const shim_tensor *in, shim_stream *s) {
  const char *what = "shim_all_to_all";
  SHIM_TRY(refused(c, what, SHIM_CALL_ALL_TO_ALL, shim_check_all_to_all(c, out, in)));
  return guarded(c, what, [&]() -> int {
    SHIM_TRY(agree_on(c, what, shim_comm_header_of(SHIM_CALL_ALL_TO_ALL, in, 0)));
    if (in->numel == 0) return SHIM_OK;
    gloo::AlltoallOptions opts(c->context);
    opts.setInput(static_cast<uint8_t *>(data(in)), nbytes(in));
    opts.setOutput(static_cast<uint8_t *>(data(out)), nbytes(out));
    set_tag_and_timeout(c, opts);
    gloo::alltoall(opts);
    return SHIM_OK;
  });
}

int shim_broadcast(shim_comm *c, shim_tensor *t, int32_t root, shim_stream *s) {
  const char *what = "shim_broadcast";
  SHIM_TRY(refused(c, what, SHIM_CALL_BROADCAST, shim_check_broadcast(c, t, root)));
  return guarded(c, what, [&]() -> int {
    SHIM_TRY(agree_on(c, what, shim_comm_header_of(SHIM_CALL_BROADCAST, t, root)));
    if (t->numel == 0) return SHIM_OK;
    gloo::BroadcastOptions opts(c->context);
    opts.setOutput(static_cast<uint8_t *>(data(t)), nbytes(t));
    opts.setRoot(root);
    set_tag_and_timeout(c, opts);
    gloo::broadcast(opts);
    return SHIM_OK;
  });
}

int shim_barrier(shim_comm *c, shim_stream *s) {
  SHIM_TRY(shim_check_comm_usable("shim_barrier", c));
  return guarded(c, "shim_barrier", [&] {
    gloo::BarrierOptions opts(c->context);
    set_tag_and_timeout(c, opts);
    gloo::barrier(opts);
    return SHIM_OK;
  });
}

// Two rounds. First each side of every transfer sends its header to the other and receives
// theirs, and a receiver posts its data receive at once; then a sender whose receiver agrees
// sends its data, and one that does not sends an empty message where a receive is waiting
// (which completes it). Both sides know both headers, so they decide alike, and their
// sequences stay matched whatever they decide.
int shim_p2p(shim_comm *c, int32_t n, const int32_t *kinds, const int32_t *peers, shim_tensor *const *tensors,
             shim_stream *s) {
  const char *what = "shim_p2p";
  SHIM_TRY(shim_check_p2p(c, n, kinds, peers, tensors));
  if (n == 0) return SHIM_OK;
  return guarded(c, what, [&]() -> int {
    constexpr size_t H = sizeof(shim_comm_header);
    // [0, n): this member's header for each transfer; [n, 2n): the other side's.
    std::vector<shim_comm_header> headers(2 * static_cast<size_t>(n));
    auto exchanged = c->context->createUnboundBuffer(headers.data(), headers.size() * H);
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> moved(n);
    std::vector<uint64_t> slots(n);
    const auto deadline = std::chrono::steady_clock::now() + c->timeout;
    for (int32_t i = 0; i < n; i++) {
      const int32_t peer = peers[i];
      const bool send = kinds[i] == SHIM_SEND;
      const int32_t src = send ? c->rank : peer, dst = send ? peer : c->rank;
      const uint64_t sequence = send ? c->sent[peer]++ : c->received[peer]++;
      headers[i] = shim_comm_header_of(send ? SHIM_CALL_SEND : SHIM_CALL_RECV, tensors[i], 0);
      const uint64_t own = p2p_slot(send ? kSenderHeaderPrefix : kReceiverHeaderPrefix, src, dst, sequence);
      const uint64_t other = p2p_slot(send ? kReceiverHeaderPrefix : kSenderHeaderPrefix, src, dst, sequence);
      exchanged->send(peer, own, static_cast<size_t>(i) * H, H);
      exchanged->recv(peer, other, static_cast<size_t>(n + i) * H, H);
      slots[i] = p2p_slot(kP2PSlotPrefix, src, dst, sequence);
      if (!send && tensors[i]->numel > 0) {
        moved[i] = c->context->createUnboundBuffer(data(tensors[i]), nbytes(tensors[i]));
        moved[i]->recv(peer, slots[i]);
      }
    }
    for (int32_t i = 0; i < n; i++) wait_transfer(*exchanged, false, deadline);
    int32_t first_disagreement = -1;
    for (int32_t i = 0; i < n; i++) {
      const bool agreed = shim_comm_headers_agree(&headers[i], &headers[n + i]);
      if (!agreed && first_disagreement < 0) first_disagreement = i;
      if (kinds[i] != SHIM_SEND) continue;
      if (agreed && tensors[i]->numel > 0) {
        moved[i] = c->context->createUnboundBuffer(data(tensors[i]), nbytes(tensors[i]));
        moved[i]->send(peers[i], slots[i]);
      } else if (!agreed && headers[n + i].numel > 0) {
        moved[i] = c->context->createUnboundBuffer(headers.data(), H);
        moved[i]->send(peers[i], slots[i], 0, 0);
      }
    }
    for (int32_t i = 0; i < n; i++)
      if (moved[i]) wait_transfer(*moved[i], kinds[i] == SHIM_SEND, deadline);
    for (int32_t i = 0; i < n; i++) wait_transfer(*exchanged, true, deadline);
    if (first_disagreement < 0) return SHIM_OK;
    const int32_t i = first_disagreement;
    return shim_check_agreement(what, &headers[i], c->rank, &headers[n + i], peers[i]);
  });
}

}  // extern "C"
