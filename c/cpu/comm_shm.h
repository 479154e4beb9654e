// comm_shm.h: all-reduce through shared memory, for a communicator whose members all run on
// one host. Over loopback TCP every byte is copied into and out of the kernel on both sides and
// the TCP stack runs on the same two cores as the reduction; through a shared segment a member
// copies its input in once, reduces its slice straight from the others' segments, and copies
// the reduced slices out. comm_gloo.cc decides when to use it; Gloo's pairs still carry
// everything else.
#ifndef MONARCH_SHIM_COMM_SHM_H
#define MONARCH_SHIM_COMM_SHM_H

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../common/internal.h"
#include "comm_gloo_reduce.h"

// One member's view of the group's segments. Each member creates its own segment (a memfd)
// and publishes where it is; the others map it through /proc/<pid>/fd/<fd>, which works only
// on the same host (and PID namespace), and check a random token so that a foreign process's
// descriptor is never taken for it. A member in another network namespace counts as another
// host: its segment is not mapped.
class ShmGroup {
 public:
  // What a member publishes (inside its communicator address bytes).
  static constexpr size_t kPublishedBytes = 32;

  // Creates this member's segment, unless `enabled` is false. Never throws: a member without
  // a segment publishes so, and attach() then fails on every member.
  ShmGroup(int rank, int size, bool enabled);
  ~ShmGroup();
  ShmGroup(const ShmGroup &) = delete;
  ShmGroup &operator=(const ShmGroup &) = delete;

  // Writes kPublishedBytes describing this member's segment.
  void publish(char *out) const;

  // Maps every member's segment, given what each published (this member's own included, in
  // rank order); false when any cannot be mapped. Every member must agree on the result
  // before using the group (comm_gloo.cc all-reduces it).
  bool attach(const std::vector<const char *> &published);

  // Closes this member's descriptor once every member has mapped the segment (or given up).
  void closeDescriptor();

  // out = the reduction of every member's `in` (bytes long, elements of element_size), in
  // rank order, so every member gets the same bits; out may be in. `mine` describes this
  // member's call; every member checks every other's in the first round, before reading any
  // stage, and when one disagrees all return the lowest such member (its header in *theirs),
  // with nothing reduced and the group still usable. Else returns -1. Throws
  // std::runtime_error; its text says "timed out" when the deadline passed. After a throw the
  // group is unusable and the other members' calls fail soon after.
  int allreduce(void *out, const void *in, size_t bytes, size_t element_size, shim_reduce_fn fn,
                std::chrono::steady_clock::time_point deadline, const shim_comm_header &mine, shim_comm_header *theirs);

  // Tells the other members this one has failed (any of its collectives), so that they stop
  // waiting for it here.
  void fail();

 private:
  struct Segment {
    void *base = nullptr;
    pid_t pid = 0;
  };

  void await(int which, uint32_t target, std::chrono::steady_clock::time_point deadline);
  void checkPeers(bool probeLiveness) const;
  // The first member whose header for `round` does not agree with ours (copied to *theirs), or -1.
  int disagreeing(uint32_t round, shim_comm_header *theirs) const;

  int rank_, size_;
  int fd_ = -1;
  uint64_t token_[2] = {0, 0};
  std::vector<Segment> segments_;  // by member; ours first mapped at creation
  uint32_t round_ = 0;             // chunks all-reduced so far, the same on every member
};

#endif
