// comm_gloo.cc: the communicator section of shim.h on Gloo's tcp transport.
//
// Creation is two-phase: shim_comm_create makes a device, a context and one pair per peer and
// keeps the pairs' addresses for the caller to publish; shim_comm_connect connects each pair
// to the slot of its peer's bytes that addresses this rank. Every C++ exception stops at the
// entry points below. A failure inside Gloo leaves its pairs in an unknown state, so the comm
// remembers it and refuses later work with that first error.
#include <algorithm>
#include <cctype>
#include <chrono>
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

  // One pair per peer; their addresses end to end in increasing peer order.
  std::vector<char> createPairs() {
    // A pair waits five times its own timeout for its connection, so pairs get a fifth of
    // ours (rounded up) and connect keeps within it; async pairs use it for nothing else.
    transportContext_->setTimeout((getTimeout() + milliseconds(4)) / 5);
    std::vector<char> bytes;
    for (int peer = 0; peer < size; peer++) {
      if (peer == rank) continue;
      std::vector<char> address = transportContext_->createPair(peer)->address().bytes();
      bytes.insert(bytes.end(), address.begin(), address.end());
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

}  // namespace

struct shim_comm {
  int32_t rank = 0;
  int32_t size = 0;
  milliseconds timeout{0};
  std::shared_ptr<TwoPhaseContext> context;
  std::vector<char> address;  // what shim_comm_address hands out
  bool connected = false;
  std::string failure;  // the first transport failure; empty while the comm is usable
  uint32_t tag = 0;     // collective sequence number, the same on every member
  std::vector<uint64_t> sent, received;  // p2p transfers issued per peer, in each direction
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
  if (c != nullptr && c->failure.empty()) c->failure = std::string(what) + ": " + message;
  return shim_fail(code, "%s: %s", what, message.c_str());
}

int check_usable(const shim_comm *c, const char *what) {
  if (c == nullptr) return shim_fail(SHIM_E_INVALID, "%s: comm is null", what);
  if (!c->failure.empty())
    return shim_fail(SHIM_E_COMM, "%s: comm unusable after an earlier failure (%s)", what, c->failure.c_str());
  if (!c->connected) return shim_fail(SHIM_E_INVALID, "%s: comm is not connected yet", what);
  return SHIM_OK;
}

int check_tensor(const shim_tensor *t, const char *what, const char *name) {
  if (t == nullptr || t->storage == nullptr) return shim_fail(SHIM_E_INVALID, "%s: %s is null", what, name);
  if (t->numel > 0 && t->storage->data == nullptr) return shim_fail(SHIM_E_INVALID, "%s: %s has no memory", what, name);
  return SHIM_OK;
}

int check_same_dtype(const shim_tensor *out, const shim_tensor *in, const char *what) {
  if (out->dtype != in->dtype)
    return shim_fail(SHIM_E_INVALID, "%s: dtypes differ (out %s, in %s)", what, shim_dtype_name(out->dtype),
                     shim_dtype_name(in->dtype));
  return SHIM_OK;
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
  opts.setTag(c->tag++);
  opts.setTimeout(c->timeout);
  gloo::allreduce(opts);
}

void allreduce(shim_comm *c, void *out, const void *in, size_t n, int64_t element_size, shim_reduce_fn fn) {
  switch (element_size) {
    case 1: allreduce_as<uint8_t>(c, out, in, n, fn); break;
    case 2: allreduce_as<uint16_t>(c, out, in, n, fn); break;
    case 4: allreduce_as<uint32_t>(c, out, in, n, fn); break;
    default: allreduce_as<uint64_t>(c, out, in, n, fn); break;
  }
}

// Waits for one posted transfer, within what is left of the call's deadline.
void wait_transfer(gloo::transport::UnboundBuffer &buffer, bool send, std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
  left = std::max(left, milliseconds(1));  // to Gloo, 0 means no limit and -1 its default
  bool done = send ? buffer.waitSend(left) : buffer.waitRecv(left);
  if (!done) throw std::runtime_error("transfer aborted");
}

}  // namespace

extern "C" {

int shim_comm_create(int32_t rank, int32_t size, int64_t timeout_ms, const char *hostname, shim_comm **out) {
  const char *what = "shim_comm_create";
  SHIM_REQUIRE(out, "out");
  SHIM_REQUIRE(hostname, "hostname");
  if (size < 1) return shim_fail(SHIM_E_INVALID, "%s: size %d < 1", what, size);
  if (rank < 0 || rank >= size) return shim_fail(SHIM_E_INVALID, "%s: rank %d outside 0..%d", what, rank, size - 1);
  if (timeout_ms <= 0) return shim_fail(SHIM_E_INVALID, "%s: timeout %lld ms is not positive", what, (long long)timeout_ms);
  return guarded(nullptr, what, [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = hostname[0] != '\0' ? hostname : "127.0.0.1";
    auto comm = std::make_unique<shim_comm>();
    comm->rank = rank;
    comm->size = size;
    comm->timeout = milliseconds(timeout_ms);
    comm->context = std::make_shared<TwoPhaseContext>(rank, size, gloo::transport::tcp::CreateDevice(attr), comm->timeout);
    comm->address = comm->context->createPairs();
    comm->sent.assign(size, 0);
    comm->received.assign(size, 0);
    *out = comm.release();
    return SHIM_OK;
  });
}

int shim_comm_address(shim_comm *c, uint8_t *buf, int64_t cap, int64_t *len) {
  SHIM_REQUIRE(c, "comm");
  SHIM_REQUIRE(len, "len");
  *len = static_cast<int64_t>(c->address.size());
  if (buf == nullptr) return SHIM_OK;  // a size query
  if (cap < *len) return shim_fail(SHIM_E_INVALID, "shim_comm_address: capacity %lld < %lld bytes", (long long)cap, (long long)*len);
  if (!c->address.empty()) memcpy(buf, c->address.data(), c->address.size());
  return SHIM_OK;
}

int shim_comm_connect(shim_comm *c, const uint8_t *addrs, const int64_t *lens) {
  const char *what = "shim_comm_connect";
  SHIM_REQUIRE(c, "comm");
  SHIM_REQUIRE(lens, "lens");
  if (!c->failure.empty()) return shim_fail(SHIM_E_COMM, "%s: comm unusable after an earlier failure (%s)", what, c->failure.c_str());
  if (c->connected) return shim_fail(SHIM_E_INVALID, "%s: already connected", what);
  const int32_t peers = c->size - 1;
  // Every member publishes one equal-length slot per peer; ours must be what we published.
  std::vector<int64_t> offsets(c->size);
  int64_t total = 0;
  for (int32_t i = 0; i < c->size; i++) {
    const int64_t expected = static_cast<int64_t>(c->address.size());
    if (lens[i] != expected)
      return shim_fail(SHIM_E_INVALID, "%s: member %d published %lld bytes, expected %lld", what, i, (long long)lens[i],
                       (long long)expected);
    offsets[i] = total;
    total += lens[i];
  }
  if (peers == 0) {
    c->connected = true;
    return SHIM_OK;
  }
  SHIM_REQUIRE(addrs, "addrs");
  if (memcmp(addrs + offsets[c->rank], c->address.data(), c->address.size()) != 0)
    return shim_fail(SHIM_E_INVALID, "%s: the bytes at rank %d are not this member's address", what, c->rank);
  const size_t slot = c->address.size() / static_cast<size_t>(peers);
  return guarded(c, what, [&] {
    for (int32_t peer = 0; peer < c->size; peer++) {
      if (peer == c->rank) continue;
      // peer's slots skip peer itself, so ours is at index rank below it and rank - 1 above.
      const int32_t index = c->rank < peer ? c->rank : c->rank - 1;
      const char *start = reinterpret_cast<const char *>(addrs + offsets[peer]) + static_cast<size_t>(index) * slot;
      c->context->connectPair(peer, std::vector<char>(start, start + slot));
    }
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
  const char *what = "shim_all_reduce";
  SHIM_TRY(check_usable(c, what));
  SHIM_TRY(check_tensor(out, what, "out"));
  SHIM_TRY(check_tensor(in, what, "in"));
  SHIM_TRY(check_same_dtype(out, in, what));
  if (out->numel != in->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out has %lld elements, in %lld", what, (long long)out->numel, (long long)in->numel);
  shim_reduce_fn fn;
  SHIM_TRY(shim_comm_reduce_fn(what, in->dtype, op, &fn));
  if (in->numel == 0) return SHIM_OK;
  return guarded(c, what, [&] {
    allreduce(c, data(out), data(in), static_cast<size_t>(in->numel), shim_dtype_size(in->dtype), fn);
    if (op == SHIM_OP_AVG) shim_comm_divide(out->dtype, data(out), static_cast<size_t>(out->numel), c->size);
    return SHIM_OK;
  });
}

int shim_all_gather(shim_comm *c, shim_tensor *out, const shim_tensor *in, shim_stream *s) {
  const char *what = "shim_all_gather";
  SHIM_TRY(check_usable(c, what));
  SHIM_TRY(check_tensor(out, what, "out"));
  SHIM_TRY(check_tensor(in, what, "in"));
  SHIM_TRY(check_same_dtype(out, in, what));
  if (out->numel != in->numel * c->size)
    return shim_fail(SHIM_E_INVALID, "%s: out has %lld elements, not %d x %lld", what, (long long)out->numel, c->size,
                     (long long)in->numel);
  if (in->numel == 0) return SHIM_OK;
  return guarded(c, what, [&] {
    gloo::AllgatherOptions opts(c->context);
    opts.setInput(static_cast<uint8_t *>(data(in)), nbytes(in));
    opts.setOutput(static_cast<uint8_t *>(data(out)), nbytes(out));
    opts.setTag(c->tag++);
    opts.setTimeout(c->timeout);
    gloo::allgather(opts);
    return SHIM_OK;
  });
}

// This Gloo has no options-style reduce-scatter: all-reduce into scratch, keep our chunk.
int shim_reduce_scatter(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op, shim_stream *s) {
  const char *what = "shim_reduce_scatter";
  SHIM_TRY(check_usable(c, what));
  SHIM_TRY(check_tensor(out, what, "out"));
  SHIM_TRY(check_tensor(in, what, "in"));
  SHIM_TRY(check_same_dtype(out, in, what));
  if (in->numel != out->numel * c->size)
    return shim_fail(SHIM_E_INVALID, "%s: in has %lld elements, not %d x %lld", what, (long long)in->numel, c->size,
                     (long long)out->numel);
  shim_reduce_fn fn;
  SHIM_TRY(shim_comm_reduce_fn(what, in->dtype, op, &fn));
  if (in->numel == 0) return SHIM_OK;
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
  const char *what = "shim_all_to_all";
  SHIM_TRY(check_usable(c, what));
  SHIM_TRY(check_tensor(out, what, "out"));
  SHIM_TRY(check_tensor(in, what, "in"));
  SHIM_TRY(check_same_dtype(out, in, what));
  if (out->numel != in->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out has %lld elements, in %lld", what, (long long)out->numel, (long long)in->numel);
  if (in->numel % c->size != 0)
    return shim_fail(SHIM_E_INVALID, "%s: %lld elements do not split into %d chunks", what, (long long)in->numel, c->size);
  if (in->numel == 0) return SHIM_OK;
  if (data(in) == data(out)) return shim_fail(SHIM_E_INVALID, "%s: in and out share memory", what);
  return guarded(c, what, [&] {
    gloo::AlltoallOptions opts(c->context);
    opts.setInput(static_cast<uint8_t *>(data(in)), nbytes(in));
    opts.setOutput(static_cast<uint8_t *>(data(out)), nbytes(out));
    opts.setTag(c->tag++);
    opts.setTimeout(c->timeout);
    gloo::alltoall(opts);
    return SHIM_OK;
  });
}

int shim_broadcast(shim_comm *c, shim_tensor *t, int32_t root, shim_stream *s) {
  const char *what = "shim_broadcast";
  SHIM_TRY(check_usable(c, what));
  SHIM_TRY(check_tensor(t, what, "tensor"));
  if (root < 0 || root >= c->size) return shim_fail(SHIM_E_INVALID, "%s: root %d outside 0..%d", what, root, c->size - 1);
  if (t->numel == 0) return SHIM_OK;
  return guarded(c, what, [&] {
    gloo::BroadcastOptions opts(c->context);
    opts.setOutput(static_cast<uint8_t *>(data(t)), nbytes(t));
    opts.setRoot(root);
    opts.setTag(c->tag++);
    opts.setTimeout(c->timeout);
    gloo::broadcast(opts);
    return SHIM_OK;
  });
}

int shim_barrier(shim_comm *c, shim_stream *s) {
  const char *what = "shim_barrier";
  SHIM_TRY(check_usable(c, what));
  return guarded(c, what, [&] {
    gloo::BarrierOptions opts(c->context);
    opts.setTag(c->tag++);
    opts.setTimeout(c->timeout);
    gloo::barrier(opts);
    return SHIM_OK;
  });
}

int shim_p2p(shim_comm *c, int32_t n, const int32_t *kinds, const int32_t *peers, shim_tensor *const *tensors,
             shim_stream *s) {
  const char *what = "shim_p2p";
  SHIM_TRY(check_usable(c, what));
  if (n < 0) return shim_fail(SHIM_E_INVALID, "%s: n %d < 0", what, n);
  if (n == 0) return SHIM_OK;
  SHIM_REQUIRE(kinds, "kinds");
  SHIM_REQUIRE(peers, "peers");
  SHIM_REQUIRE(tensors, "tensors");
  for (int32_t i = 0; i < n; i++) {
    if (kinds[i] != SHIM_SEND && kinds[i] != SHIM_RECV) return shim_fail(SHIM_E_INVALID, "%s: op %d has kind %d", what, i, kinds[i]);
    if (peers[i] < 0 || peers[i] >= c->size || peers[i] == c->rank)
      return shim_fail(SHIM_E_INVALID, "%s: op %d has peer %d (this member is %d of %d)", what, i, peers[i], c->rank, c->size);
    SHIM_TRY(check_tensor(tensors[i], what, "a tensor"));
  }
  return guarded(c, what, [&] {
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
