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
#include <netdb.h>

#include <algorithm>
#include <array>
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

uint64_t p2p_slot(int32_t src, int32_t dst, uint64_t sequence) {
  return kP2PSlotPrefix | (uint64_t{src > dst} << 55) | (sequence & kP2PSequenceMask);
}

// The exchange, for members on several hosts: an all-reduce of at most kExchangeBytes (all
// peers' contributions together) sends this member's whole input to every peer and reduces
// what arrives locally, in rank order, so every member computes the same bits. Gloo's ring
// needs 2(n-1) dependent steps, each a receive-ready notice and then the data, and each hop
// costs tens of microseconds on a busy machine. Here the receives for the next exchange are
// posted as soon as the current one has arrived, so a member's sends find the peers ready and
// go out at once: one hop per all-reduce. The bytes sent are (n-1) x input (the ring's are
// 2(n-1)/n x input), which is why only small inputs take this path. Two scratch halves
// alternate, so the next exchange's receives can land while this one is being reduced.
constexpr size_t kExchangeBytes = 256 * 1024;
constexpr uint64_t kExchangeSlotPrefix = uint64_t{0x11} << 56;
constexpr uint64_t kExchangeSequenceMask = (uint64_t{1} << 56) - 1;

struct Exchange {
  size_t capacity = 0;  // bytes per member in each half of the scratch
  std::array<std::unique_ptr<uint8_t[]>, 2> scratch;  // size x capacity each; slot r holds member r's input
  std::array<std::unique_ptr<gloo::transport::UnboundBuffer>, 2> inbox;  // over each half
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
  std::unique_ptr<Exchange> exchange;  // made on the first small all-reduce
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

void *data(const shim_tensor *t) { return t->storage->data; }
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
    if (peer != c->rank) inbox.recv(peer, slot, static_cast<size_t>(peer) * x.capacity, x.capacity);
  x.posted = true;
}

void allreduce_by_exchange(shim_comm *c, void *out, const void *in, size_t n, size_t bytes, shim_reduce_fn fn) {
  if (!c->exchange) {
    auto x = std::make_unique<Exchange>();
    x->capacity = exchange_capacity(c);
    for (int half = 0; half < 2; half++) {
      x->scratch[half].reset(new uint8_t[static_cast<size_t>(c->size) * x->capacity]);
      x->inbox[half] = c->context->createUnboundBuffer(x->scratch[half].get(), static_cast<size_t>(c->size) * x->capacity);
    }
    c->exchange = std::move(x);
  }
  Exchange &x = *c->exchange;
  if (x.postFailure) std::rethrow_exception(x.postFailure);
  const auto deadline = std::chrono::steady_clock::now() + c->timeout;
  if (!x.posted) post_exchange(c, x);
  const uint64_t slot = kExchangeSlotPrefix | (x.sequence & kExchangeSequenceMask);
  uint8_t *arrived = x.scratch[x.sequence & 1].get();
  gloo::transport::UnboundBuffer &inbox = *x.inbox[x.sequence & 1];

  auto mine = c->context->createUnboundBuffer(const_cast<void *>(in), bytes);
  for (int32_t peer = 0; peer < c->size; peer++)
    if (peer != c->rank) mine->send(peer, slot, 0, bytes);
  for (int32_t i = 1; i < c->size; i++) wait_transfer(inbox, false, deadline);
  x.sequence++;
  x.posted = false;
  try {
    post_exchange(c, x);
  } catch (...) {
    x.postFailure = std::current_exception();
  }
  // The sends read `in`, which may be `out`: they must be done before out is written.
  for (int32_t i = 1; i < c->size; i++) wait_transfer(*mine, true, deadline);

  // In place, this member's input is overwritten by the first step; past rank 1 it is still
  // needed then, so it is read from a copy.
  const void *own = in;
  if (in == out && c->rank >= 2) {
    memcpy(arrived + static_cast<size_t>(c->rank) * x.capacity, in, bytes);
    own = arrived + static_cast<size_t>(c->rank) * x.capacity;
  }
  auto from = [&](int32_t r) -> const void * { return r == c->rank ? own : arrived + static_cast<size_t>(r) * x.capacity; };
  fn(out, from(0), from(1), n);
  for (int32_t r = 2; r < c->size; r++) fn(out, out, from(r), n);
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

void allreduce(shim_comm *c, void *out, const void *in, size_t n, int64_t element_size, shim_reduce_fn fn) {
  const size_t bytes = n * static_cast<size_t>(element_size);
  if (c->shm_ready) return c->shm->allreduce(out, in, bytes, static_cast<size_t>(element_size), fn, std::chrono::steady_clock::now() + c->timeout);
  if (c->size > 1 && bytes <= exchange_capacity(c)) return allreduce_by_exchange(c, out, in, n, bytes, fn);
  switch (element_size) {
    case 1: allreduce_as<uint8_t>(c, out, in, n, fn); break;
    case 2: allreduce_as<uint16_t>(c, out, in, n, fn); break;
    case 4: allreduce_as<uint32_t>(c, out, in, n, fn); break;
    default: allreduce_as<uint64_t>(c, out, in, n, fn); break;
  }
}

}  // namespace

extern "C" {

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
      // MONARCH_COMM_SHM=0 keeps every collective on TCP (as between hosts).
      const char *shm = getenv("MONARCH_COMM_SHM");
      comm->shm = std::make_unique<ShmGroup>(rank, size, shm == nullptr || strcmp(shm, "0") != 0);
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

int shim_comm_destroy(shim_comm *c) {
  SHIM_REQUIRE(c, "comm");
  return guarded(nullptr, "shim_comm_destroy", [&] {
    delete c;
    return SHIM_OK;
  });
}

int shim_all_reduce(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op, shim_stream *s) {
  SHIM_TRY(shim_check_all_reduce(c, out, in, op));
  if (in->numel == 0) return SHIM_OK;
  const shim_reduce_fn fn = shim_comm_reduce_fn(in->dtype, op);
  return guarded(c, "shim_all_reduce", [&] {
    allreduce(c, data(out), data(in), static_cast<size_t>(in->numel), shim_dtype_size(in->dtype), fn);
    if (op == SHIM_OP_AVG) shim_comm_divide(out->dtype, data(out), static_cast<size_t>(out->numel), c->size);
    return SHIM_OK;
  });
}

int shim_all_gather(shim_comm *c, shim_tensor *out, const shim_tensor *in, shim_stream *s) {
  SHIM_TRY(shim_check_all_gather(c, out, in));
  if (in->numel == 0) return SHIM_OK;
  return guarded(c, "shim_all_gather", [&] {
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
  SHIM_TRY(shim_check_reduce_scatter(c, out, in, op));
  if (in->numel == 0) return SHIM_OK;
  const shim_reduce_fn fn = shim_comm_reduce_fn(in->dtype, op);
  std::unique_ptr<uint8_t[]> scratch(new (std::nothrow) uint8_t[nbytes(in)]);
  if (!scratch) return shim_fail(SHIM_E_NOMEM, "%s: no memory for a %zu-byte scratch buffer", what, nbytes(in));
  return guarded(c, what, [&] {
    allreduce(c, scratch.get(), data(in), static_cast<size_t>(in->numel), shim_dtype_size(in->dtype), fn);
    memcpy(data(out), scratch.get() + static_cast<size_t>(c->rank) * nbytes(out), nbytes(out));
    if (op == SHIM_OP_AVG) shim_comm_divide(out->dtype, data(out), static_cast<size_t>(out->numel), c->size);
    return SHIM_OK;
  });
}

int shim_all_to_all(shim_comm *c, shim_tensor *out, const shim_tensor *in, shim_stream *s) {
  SHIM_TRY(shim_check_all_to_all(c, out, in));
  if (in->numel == 0) return SHIM_OK;
  return guarded(c, "shim_all_to_all", [&] {
    gloo::AlltoallOptions opts(c->context);
    opts.setInput(static_cast<uint8_t *>(data(in)), nbytes(in));
    opts.setOutput(static_cast<uint8_t *>(data(out)), nbytes(out));
    set_tag_and_timeout(c, opts);
    gloo::alltoall(opts);
    return SHIM_OK;
  });
}

int shim_broadcast(shim_comm *c, shim_tensor *t, int32_t root, shim_stream *s) {
  SHIM_TRY(shim_check_broadcast(c, t, root));
  if (t->numel == 0) return SHIM_OK;
  return guarded(c, "shim_broadcast", [&] {
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

int shim_p2p(shim_comm *c, int32_t n, const int32_t *kinds, const int32_t *peers, shim_tensor *const *tensors,
             shim_stream *s) {
  SHIM_TRY(shim_check_p2p(c, n, kinds, peers, tensors));
  if (n == 0) return SHIM_OK;
  return guarded(c, "shim_p2p", [&] {
    struct Transfer {
      std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
      bool send;
    };
    std::vector<Transfer> posted;
    for (int32_t i = 0; i < n; i++) {
      const shim_tensor *t = tensors[i];
      if (t->numel == 0) continue;  // both sides skip it, so the sequences stay matched
      const int32_t peer = peers[i];
      const bool send = kinds[i] == SHIM_SEND;
      auto buffer = c->context->createUnboundBuffer(data(t), nbytes(t));
      if (send) buffer->send(peer, p2p_slot(c->rank, peer, c->sent[peer]++));
      else buffer->recv(peer, p2p_slot(peer, c->rank, c->received[peer]++));
      posted.push_back(Transfer{std::move(buffer), send});
    }
    const auto deadline = std::chrono::steady_clock::now() + c->timeout;
    for (Transfer &t : posted) wait_transfer(*t.buffer, t.send, deadline);
    return SHIM_OK;
  });
}

}  // extern "C"
