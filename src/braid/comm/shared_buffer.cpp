// allocate_shared() and the group's SharedWindow (comm/shared_window.h).
//
// Allocation is a collective in two rounds over the group's own allgather: each rank
// creates a segment (plus, the first time, its control segment) and the ranks exchange
// where to find them; each maps its peers' and the ranks exchange whether that worked.
// Where the transport allows (one pid namespace) segments are anonymous memfds that peers
// open through /proc/<pid>/fd, so nothing ever has a name in /dev/shm, even if the job is
// killed mid-call. Otherwise they are /dev/shm names, unlinked once the second round shows
// everyone has mapped them. Either round failing anywhere sends every rank to private
// memory, so ranks never disagree about which buffers are shared.
#include "comm/shared_buffer.h"

#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "comm/blame.h"
#include "comm/collectives.h"
#include "comm/group.h"
#include "comm/shared_window.h"
#include "comm/stall_watch.h"
#include "comm/transport.h"
#include "core/error.h"

namespace braid::comm {

using namespace std::chrono_literals;

void* SharedBuffer::data() const { return region_ ? region_->data() : nullptr; }
size_t SharedBuffer::bytes() const { return region_ ? region_->bytes : 0; }
bool SharedBuffer::shared() const { return region_ && region_->id != 0; }

SharedRegion::~SharedRegion() {
  if (auto w = window.lock()) w->remove(id);
}

SharedWindow::SharedWindow(shm::Mapping own_control, std::vector<shm::Mapping> peer_control,
                           int rank)
    : own_control_(std::move(own_control)), peer_control_(std::move(peer_control)) {
  for (size_t r = 0; r < peer_control_.size(); ++r) {
    uint8_t* p = static_cast<int>(r) == rank ? own_control_.data() : peer_control_[r].data();
    control_.push_back(reinterpret_cast<ControlBlock*>(p));
  }
}

void SharedWindow::publish_call(int rank, uint32_t seq, const CallSignature& sig) {
  ControlBlock& c = control(rank);
  const uint64_t packed = static_cast<uint64_t>(sig.call) | static_cast<uint64_t>(sig.dtype) << 8 |
                          static_cast<uint64_t>(sig.op) << 16 |
                          static_cast<uint64_t>(sig.algorithm) << 24 |
                          static_cast<uint64_t>(static_cast<uint32_t>(sig.root)) << 32;
  c.version.store(c.version.load(std::memory_order_relaxed) | 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  c.signature.store(packed, std::memory_order_relaxed);
  c.count.store(sig.count, std::memory_order_relaxed);
  c.version.store(uint64_t{seq} * 2, std::memory_order_release);
}

std::optional<std::pair<uint32_t, CallSignature>> SharedWindow::published_call(int rank) const {
  const ControlBlock& c = control(rank);
  const uint64_t before = c.version.load(std::memory_order_acquire);
  if (before & 1) return std::nullopt;
  const uint64_t packed = c.signature.load(std::memory_order_relaxed);
  const uint64_t count = c.count.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (c.version.load(std::memory_order_relaxed) != before || before == 0) return std::nullopt;
  CallSignature sig;
  sig.call = static_cast<CallKind>(packed & 0xff);
  sig.dtype = static_cast<DType>((packed >> 8) & 0xff);
  sig.op = static_cast<ReduceOp>((packed >> 16) & 0xff);
  sig.algorithm = static_cast<uint8_t>((packed >> 24) & 0xff);
  sig.root = static_cast<int32_t>(static_cast<uint32_t>(packed >> 32));
  sig.count = count;
  return std::make_pair(static_cast<uint32_t>(before / 2), sig);
}

const SharedRegion* SharedWindow::find(const void* p, size_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  for (const auto& [id, region] : regions_) {
    const auto start = reinterpret_cast<uintptr_t>(region->data());
    if (at >= start && at - start <= region->bytes && bytes <= region->bytes - (at - start))
      return region;
  }
  return nullptr;
}

void wait_for_peer(Group& g, int peer, const Deadline& deadline, const std::function<bool()>& ready,
                   const std::function<std::string()>& waiting_for) {
  if (ready()) return;
  // With more ranks than cores a spinning rank steals the core its peer needs.
  // (hardware_concurrency() reads /sys on every call.)
  static const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const bool oversubscribed = static_cast<unsigned>(g.size()) > cores;
  const auto spin = oversubscribed ? std::chrono::nanoseconds(2us) : std::chrono::nanoseconds(50us);
  const auto yield =
      oversubscribed ? std::chrono::nanoseconds(200us) : std::chrono::nanoseconds(1ms);
  const Clock::time_point start = Clock::now();
  Clock::time_point next_check = start + 100ms;
  StallWatch stall(deadline);
  for (;;) {
    if (ready()) return;
    const Clock::time_point now = Clock::now();
    if (stall.due(now)) stall.report(now, g.rank(), waiting_for());
    const bool timed_out = now >= deadline.at();
    // At the deadline look once more: a peer that died is named as dead, not as slow.
    if (now >= next_check || timed_out) {
      next_check = now + 100ms;
      const std::string gone = g.transport().peer_gone(g.global_rank(peer));
      if (!gone.empty())
        BRAID_THROW(PeerError, "rank ", g.rank(), " was waiting for ", waiting_for(), ": ", gone);
    }
    if (timed_out)
      BRAID_THROW(TimeoutError, "rank ", g.rank(), " timed out after ", deadline.waited_seconds(),
                  " s waiting for ", waiting_for(), "; rank ", peer,
                  " is alive but has not got there (stopped, stuck, or far behind): check that "
                  "every rank makes the same calls, or raise the timeout (BRAID_TIMEOUT_S) (",
                  no_progress_from(g.global_rank(peer)), ")");
    const auto idle = now - start;
    if (idle < spin) {
      for (int i = 0; i < 4; ++i) _mm_pause();
    } else if (idle < yield) {
      ::sched_yield();
    } else {
      std::this_thread::sleep_for(20us);
    }
  }
}

namespace {

constexpr size_t kNameBytes = 56;

// What each rank tells the others in the first round; a whole number of i64s.
struct NameRecord {
  char segment[kNameBytes] = {};
  char control[kNameBytes] = {};
  uint64_t bytes = 0;
  uint64_t ok = 0;
};
static_assert(sizeof(NameRecord) % 8 == 0);

// pid and 64 random bits: unique on this host without a process-wide counter.
std::string unique_name(const char* kind) {
  uint64_t salt = 0;
  for (;;) {
    const ssize_t n = ::getrandom(&salt, sizeof(salt), 0);
    if (n == static_cast<ssize_t>(sizeof(salt))) break;
    if (n < 0 && errno != EINTR)
      BRAID_THROW(IoError,
                  "getrandom failed while naming a shared segment: ", std::strerror(errno));
  }
  char name[kNameBytes];
  std::snprintf(name, sizeof(name), "/braid-%s-%d-%016llx", kind, static_cast<int>(::getpid()),
                static_cast<unsigned long long>(salt));
  return name;
}

size_t page_round(size_t n) {
  return (n + shm::kPageBytes - 1) / shm::kPageBytes * shm::kPageBytes;
}

// A segment this rank made: mapped; a named one is unlinked when dropped, an anonymous
// one's fd (through which peers open it) is closed.
struct OwnSegment {
  std::string name;     // a /dev/shm name to unlink, or empty
  std::string locator;  // what peers open: the name, or an anonymous segment's locator
  int fd = -1;
  shm::Mapping mapping;
  ~OwnSegment() { forget(); }
  void create(bool anonymous, const char* kind, size_t bytes, const char* what) {
    if (anonymous) {
      fd = shm::create_anonymous_segment(kind, bytes, locator);
    } else {
      name = locator = unique_name(kind);
      fd = shm::create_segment(name, bytes);
    }
    mapping = shm::Mapping(fd, 0, bytes, what);
  }
  // Every peer has mapped it (or given up): the name and the fd are no longer needed.
  void forget() {
    if (!name.empty()) ::shm_unlink(name.c_str());
    name.clear();
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

shm::Mapping map_peer(const char* name, size_t bytes, const std::string& what) {
  const int fd = shm::open_segment(name, bytes, what);
  try {
    shm::Mapping m(fd, 0, bytes, what);
    ::close(fd);
    return m;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

std::shared_ptr<SharedRegion> private_region(size_t bytes) {
  auto region = std::make_shared<SharedRegion>();
  region->bytes = bytes;
  region->fallback = Buffer(std::max<size_t>(bytes, 64), MemCategory::gradients);
  std::memset(region->fallback.data(), 0, bytes);
  return region;
}

}  // namespace

SharedBuffer allocate_shared(Group& g, size_t bytes) {
  if (g.size() == 1 || bytes == 0 || !g.transport().shares_memory() || g.backend())
    return SharedBuffer(private_region(bytes));
  const size_t n = static_cast<size_t>(g.size());
  const size_t segment_bytes = page_round(bytes);
  const bool need_control = g.shared_window() == nullptr;

  const bool anonymous = g.transport().anonymous_shared_memory();
  OwnSegment segment, control;
  NameRecord mine;
  mine.bytes = bytes;
  std::string problem;
  try {
    segment.create(anonymous, "buf", segment_bytes, "a shared buffer");
    if (need_control) {
      control.create(anonymous, "ctl", shm::kPageBytes, "a shared-buffer control block");
      new (control.mapping.data()) ControlBlock();
    }
    BRAID_CHECK(segment.locator.size() < kNameBytes && control.locator.size() < kNameBytes,
                "allocate_shared: segment locator too long");
    std::snprintf(mine.segment, kNameBytes, "%s", segment.locator.c_str());
    std::snprintf(mine.control, kNameBytes, "%s", control.locator.c_str());
    mine.ok = 1;
  } catch (const std::exception& e) {
    problem = e.what();
  }

  std::vector<NameRecord> all(n);
  allgather(g, &mine, all.data(), sizeof(NameRecord) / 8, DType::i64);
  bool ok = true;
  for (size_t r = 0; r < n; ++r) {
    if (all[r].bytes != bytes)
      BRAID_THROW(CollectiveMismatch, "allocate_shared: rank ", g.rank(), " asked for ", bytes,
                  " bytes but rank ", r, " for ", all[r].bytes,
                  "; every rank must ask for the same");
    ok = ok && all[r].ok;
  }

  auto region = std::make_shared<SharedRegion>();
  region->bytes = bytes;
  std::vector<shm::Mapping> peer_control(n);
  if (ok) {
    region->peers.resize(n);
    try {
      for (size_t r = 0; r < n; ++r) {
        if (static_cast<int>(r) == g.rank()) continue;
        const std::string what = detail::concat("rank ", r, "'s shared buffer");
        region->peers[r] = map_peer(all[r].segment, segment_bytes, what);
        if (need_control)
          peer_control[r] = map_peer(all[r].control, shm::kPageBytes, what + " control block");
      }
    } catch (const std::exception& e) {
      problem = e.what();
      ok = false;
    }
  }
  // Second round: everyone has mapped (or failed to), so the names can go.
  int64_t mapped = ok ? 1 : 0;
  allreduce(g, &mapped, 1, DType::i64, ReduceOp::min);
  segment.forget();
  control.forget();

  if (mapped == 0) {
    if (!problem.empty())
      std::fprintf(stderr,
                   "braid: rank %d: shared buffers unavailable, using private memory (%s)\n",
                   g.rank(), problem.c_str());
    return SharedBuffer(private_region(bytes));
  }
  if (need_control)
    g.set_shared_window(std::make_shared<SharedWindow>(std::move(control.mapping),
                                                       std::move(peer_control), g.rank()));
  region->own = std::move(segment.mapping);
  region->base.resize(n);
  for (size_t r = 0; r < n; ++r)
    region->base[r] =
        static_cast<int>(r) == g.rank() ? region->own.data() : region->peers[r].data();
  std::shared_ptr<SharedWindow> window = g.shared_window();
  window->add(region.get());
  region->window = window;
  return SharedBuffer(std::move(region));
}

}  // namespace braid::comm
