// comm_shm.cc: the shared-memory all-reduce of comm_shm.h.
//
// Each member's segment holds a header of counters and two halves, each a stage (a copy of
// this member's input chunk) and a result (the slice of the chunk this member reduced). Chunks
// go in rounds, alternating halves:
//   1. copy the input chunk into our stage, then publish arrived = round;
//   2. once every member has arrived, reduce our slice of the chunk from every member's stage
//      (in rank order) into our result, then publish reduced = round;
//   3. once every member has reduced, copy every member's result slice into out.
// An input of at most kWholeBytes takes a single round with one barrier: every member reduces
// the whole of it from every stage. A member that has arrived at round r has finished round
// r - 1, so when a half comes round again, two rounds later, every member is done with it.
// Waits spin briefly, then sleep on a futex in the counter's shared page; a member that fails
// sets `aborted` and wakes its waiters, and sleeping waiters also look for dead members, so a
// lost member turns into an error rather than a wait for the whole timeout.
#include "comm_shm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <new>
#include <random>
#include <stdexcept>
#include <string>

namespace {

using std::chrono::steady_clock;

constexpr size_t kChunkBytes = size_t{4} << 20;
// Up to this size every member reduces the whole input itself (one barrier, not two).
constexpr size_t kWholeBytes = 64 * 1024;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kSegmentBytes = kHeaderBytes + 4 * kChunkBytes;  // two halves of stage + result
constexpr uint32_t kMagic = 0x6d53484d;                              // "MHSm"
constexpr char kMemfdName[] = "monarch-shm-allreduce";
// Spins before sleeping: long enough to catch a member that is a moment behind, short enough
// not to take the core from it on a machine with few cores.
constexpr int kSpins = 100;
// How often a sleeping waiter wakes to look for failed or dead members.
constexpr auto kProbeEvery = std::chrono::milliseconds(20);

enum Counter { kArrived = 0, kReduced = 1 };

struct Header {
  uint64_t token[2];
  alignas(64) std::atomic<uint32_t> counters[2];
  std::atomic<uint32_t> sleepers[2];  // waiters asleep on each counter: a publish wakes only if any
  alignas(64) std::atomic<uint32_t> aborted;
  // What this member passed to the all-reduce of each half's latest round, written before it
  // publishes `arrived` for that round. A half comes round again only once every member has
  // arrived at the round between, so no one still reads the one it replaces.
  alignas(64) shim_comm_header call[2];
};
static_assert(sizeof(Header) <= kHeaderBytes, "header fits its page");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "counters are shared across processes");

struct Published {
  uint32_t magic;  // kMagic, or 0 when this member has no segment
  int32_t pid;
  int32_t fd;
  uint32_t netns;  // the low 32 bits of its network namespace's inode (networkNamespace())
  uint64_t token[2];
};
static_assert(sizeof(Published) == ShmGroup::kPublishedBytes, "published layout");

Header &header(void *base) { return *static_cast<Header *>(base); }
uint8_t *stage(void *base, uint32_t round) { return static_cast<uint8_t *>(base) + kHeaderBytes + (round & 1) * 2 * kChunkBytes; }
uint8_t *result(void *base, uint32_t round) { return stage(base, round) + kChunkBytes; }

// Counters wrap; a counter has reached `target` when it is at most 2^31 - 1 past it.
bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

// A failed FUTEX_WAKE or FUTEX_WAIT needs no handling: waiters re-check the counter and
// their deadline on every return, and wake at least every kProbeEvery regardless.
long futex(std::atomic<uint32_t> &word, int op, uint32_t value, const timespec *timeout) {
  // Not FUTEX_PRIVATE: the word lives in memory other processes map.
  return syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), op, value, timeout, nullptr, 0);
}

// Sets a counter and wakes whoever sleeps on it. Both this and the sleeper's side are
// sequentially consistent: either the sleeper sees the new value, or this sees the sleeper.
void publishCounter(Header &h, int which, uint32_t value) {
  h.counters[which].store(value);
  if (h.sleepers[which].load() != 0) futex(h.counters[which], FUTEX_WAKE, INT_MAX, nullptr);
}

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Whether pid is a live process: it exists and is not a zombie waiting to be reaped.
bool alive(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE *f = fopen(path, "re");
  if (f == nullptr) return false;
  char text[512];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  const char *name_end = strrchr(text, ')');  // the command name may itself hold spaces and ')'
  return name_end == nullptr || name_end[1] != ' ' || (name_end[2] != 'Z' && name_end[2] != 'X');
}

void *mapSegment(int fd) {
  void *base = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return base == MAP_FAILED ? nullptr : base;
}

// This process's network namespace (the low bits of /proc/self/ns/net's inode; 0 if unknown).
// Members in different network namespaces are treated as different hosts even when one kernel
// runs them (containers, the multi-host tests' namespaces): they meet over the network, as
// their addresses say, and not through each other's memory.
uint32_t networkNamespace() {
  struct stat st;
  return stat("/proc/self/ns/net", &st) == 0 ? static_cast<uint32_t>(st.st_ino) : 0;
}

// Maps the segment a peer published, or returns nullptr when it is not reachable from here.
void *mapPeer(const Published &p) {
  if (p.magic != kMagic || p.pid <= 0 || p.fd < 0) return nullptr;
  if (p.netns != networkNamespace()) return nullptr;
  char path[64], target[128];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", p.pid, p.fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n < 0) return nullptr;
  target[n] = '\0';
  if (strncmp(target, "/memfd:", 7) != 0 || strncmp(target + 7, kMemfdName, sizeof kMemfdName - 1) != 0) return nullptr;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st;
  void *base = fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == kSegmentBytes ? mapSegment(fd) : nullptr;
  close(fd);
  if (base != nullptr && memcmp(header(base).token, p.token, sizeof p.token) != 0) {
    munmap(base, kSegmentBytes);
    return nullptr;
  }
  return base;
}

}  // namespace

ShmGroup::ShmGroup(int rank, int size, bool enabled) : rank_(rank), size_(size), segments_(static_cast<size_t>(size)) {
  if (!enabled) return;
  try {
    std::random_device random;
    for (uint64_t &t : token_) t = (uint64_t{random()} << 32) | random();
  } catch (const std::exception &) {
    return;  // no randomness: publish no segment
  }
  fd_ = memfd_create(kMemfdName, MFD_CLOEXEC);
  if (fd_ < 0) return;
  void *base = ftruncate(fd_, static_cast<off_t>(kSegmentBytes)) == 0 ? mapSegment(fd_) : nullptr;
  if (base == nullptr) {
    close(fd_);
    fd_ = -1;
    return;
  }
  Header *h = new (base) Header();
  memcpy(h->token, token_, sizeof token_);
  segments_[rank_] = Segment{base, getpid()};
}

ShmGroup::~ShmGroup() {
  for (Segment &s : segments_)
    if (s.base != nullptr) munmap(s.base, kSegmentBytes);
  closeDescriptor();
}

void ShmGroup::publish(char *out) const {
  Published p{};
  if (segments_[rank_].base != nullptr) {
    p.magic = kMagic;
    p.pid = static_cast<int32_t>(getpid());
    p.fd = fd_;
    p.netns = networkNamespace();
    memcpy(p.token, token_, sizeof token_);
  }
  memcpy(out, &p, sizeof p);
}

bool ShmGroup::attach(const std::vector<const char *> &published) {
  if (segments_[rank_].base == nullptr || published.size() != segments_.size()) return false;
  bool all = true;
  for (int r = 0; r < size_; r++) {
    if (r == rank_) continue;
    Published p;
    memcpy(&p, published[r], sizeof p);
    void *base = mapPeer(p);
    if (base == nullptr) {
      all = false;
      continue;
    }
    segments_[r] = Segment{base, p.pid};
  }
  return all;
}

void ShmGroup::closeDescriptor() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void ShmGroup::fail() {
  if (segments_[rank_].base == nullptr) return;
  Header &own = header(segments_[rank_].base);
  own.aborted.store(1, std::memory_order_release);
  for (std::atomic<uint32_t> &c : own.counters) futex(c, FUTEX_WAKE, INT_MAX, nullptr);
}

void ShmGroup::checkPeers(bool probeLiveness) const {
  for (int r = 0; r < size_; r++) {
    if (r == rank_) continue;
    if (header(segments_[r].base).aborted.load(std::memory_order_acquire) != 0)
      throw std::runtime_error("shared-memory all_reduce: rank " + std::to_string(r) + " failed");
    if (probeLiveness && !alive(segments_[r].pid))
      throw std::runtime_error("shared-memory all_reduce: rank " + std::to_string(r) + " (pid " +
                               std::to_string(segments_[r].pid) + ") exited");
  }
}

// Waits until every other member's counter `which` has reached target.
void ShmGroup::await(int which, uint32_t target, steady_clock::time_point deadline) {
  for (int r = 0; r < size_; r++) {
    if (r == rank_) continue;
    Header &h = header(segments_[r].base);
    std::atomic<uint32_t> &word = h.counters[which];
    int spins = 0;
    for (uint32_t seen; !reached(seen = word.load(std::memory_order_acquire), target);) {
      if (spins++ < kSpins) {
        cpuRelax();
        continue;
      }
      checkPeers(false);
      const auto now = steady_clock::now();
      if (now >= deadline)
        throw std::runtime_error("shared-memory all_reduce: timed out waiting for rank " + std::to_string(r));
      const auto slice = std::min<steady_clock::duration>(kProbeEvery, deadline - now);
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
      const timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      h.sleepers[which].fetch_add(1);
      long slept = reached(seen = word.load(), target) ? 0 : futex(word, FUTEX_WAIT, seen, &timeout);
      const bool timedOut = slept != 0 && errno == ETIMEDOUT;
      h.sleepers[which].fetch_sub(1);
      if (timedOut) checkPeers(true);
    }
  }
}

int ShmGroup::disagreeing(uint32_t round, shim_comm_header *theirs) const {
  const shim_comm_header &mine = header(segments_[rank_].base).call[round & 1];
  for (int r = 0; r < size_; r++) {
    if (r == rank_) continue;
    const shim_comm_header &h = header(segments_[r].base).call[round & 1];
    if (!shim_comm_headers_agree(&mine, &h)) {
      *theirs = h;
      return r;
    }
  }
  return -1;
}

int ShmGroup::allreduce(void *out, const void *in, size_t bytes, size_t element_size, shim_reduce_fn fn,
                        steady_clock::time_point deadline, const shim_comm_header &mine, shim_comm_header *theirs) {
  try {
    Header &own = header(segments_[rank_].base);
    // Every path begins with a round whose `arrived` carries `mine`, so members that disagree
    // (even on which path to take) meet in that round and leave it together.
    auto begin = [&](uint32_t round, const void *chunk, size_t length, bool first) {
      own.call[round & 1] = mine;
      memcpy(stage(segments_[rank_].base, round), chunk, length);
      publishCounter(own, kArrived, round);
      await(kArrived, round, deadline);
      const int other = first ? disagreeing(round, theirs) : -1;
      if (other >= 0) publishCounter(own, kReduced, round);
      return other;
    };
    if (bytes <= kWholeBytes) {
      // Small: every member reduces the whole input from every stage; one barrier. `reduced`
      // keeps pace so that it never falls 2^31 rounds behind `arrived`.
      const uint32_t round = ++round_;
      if (const int other = begin(round, in, bytes, true); other >= 0) return other;
      const size_t count = bytes / element_size;
      fn(out, stage(segments_[0].base, round), stage(segments_[1].base, round), count);
      for (int r = 2; r < size_; r++) fn(out, out, stage(segments_[r].base, round), count);
      own.counters[kReduced].store(round);
      return -1;
    }
    for (size_t at = 0; at < bytes; at += kChunkBytes) {
      const size_t length = std::min(kChunkBytes, bytes - at), elements = length / element_size;
      const uint32_t round = ++round_;
      // This member's slice of the chunk: elements [first(rank), first(rank + 1)).
      auto first = [&](int r) { return elements * static_cast<size_t>(r) / static_cast<size_t>(size_) * element_size; };

      if (const int other = begin(round, static_cast<const uint8_t *>(in) + at, length, at == 0); other >= 0) return other;

      const size_t from = first(rank_), count = (first(rank_ + 1) - from) / element_size;
      if (count > 0) {
        uint8_t *mine = result(segments_[rank_].base, round) + from;
        fn(mine, stage(segments_[0].base, round) + from, stage(segments_[1].base, round) + from, count);
        for (int r = 2; r < size_; r++) fn(mine, mine, stage(segments_[r].base, round) + from, count);
      }
      publishCounter(own, kReduced, round);
      await(kReduced, round, deadline);

      for (int r = 0; r < size_; r++)
        memcpy(static_cast<uint8_t *>(out) + at + first(r), result(segments_[r].base, round) + first(r), first(r + 1) - first(r));
    }
    return -1;
  } catch (...) {
    fail();
    throw;
  }
}
