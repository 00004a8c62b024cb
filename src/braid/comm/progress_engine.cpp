// The progress engine (comm/progress_engine.h). One mutex guards the whole state; the
// progress thread holds it only to take the next operation and to record its end, and runs
// the operation itself outside it.
//
// Life of a slot: free -> queued (submit) -> running (the thread took it) -> done (result
// and times recorded) -> free again once no Handle refers to it. A slot is never reused
// while a handle lives, so a handle always reads its own operation. The queue is a ring of
// slot indices as long as the pool, so it can never overflow.
#include "comm/progress_engine.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "comm/auth.h"
#include "comm/transport.h"
#include "core/error.h"
#include "core/log.h"

namespace braid::comm {

namespace progress_detail {

enum class OpKind : uint8_t {
  allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  reduce,
  barrier,
  task
};
enum class OpStatus : uint8_t { free, queued, running, done };

// A collective's arguments, as the typed submissions pass them.
struct OpArgs {
  OpKind kind = OpKind::task;
  OpLabel label;
  const void* send = nullptr;
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  CollectiveOptions options;
};

struct Slot {
  OpStatus status = OpStatus::free;
  int refs = 0;  // live Handles
  uint64_t ticket = 0;
  OpArgs args;  // what to run and its name
  // A submit()ted task, constructed in `storage` while queued or running.
  ProgressEngine::Task task;
  bool has_task = false;
  alignas(std::max_align_t) unsigned char storage[ProgressEngine::kTaskBytes];
  // The result.
  std::exception_ptr error;
  OpTimes times;
};

struct EngineState {
  explicit EngineState(size_t n) : slots(n), free_slots(n), free_count(n), queue(n) {
    for (size_t i = 0; i < n; ++i) free_slots[i] = static_cast<uint32_t>(n - 1 - i);
  }

  mutable std::mutex mu;
  std::condition_variable work;     // the thread: something queued, or stop
  std::condition_variable changed;  // waiters: an operation finished or a slot came free
  std::vector<Slot> slots;
  std::vector<uint32_t> free_slots;  // a stack; capacity fixed
  size_t free_count = 0;
  std::vector<uint32_t> queue;  // ring of queued slot indices
  size_t head = 0, queued = 0;
  uint64_t tickets = 0;
  bool stopping = false;
  bool thread_exited = false;
  std::thread::id thread_id;
  std::exception_ptr first_error;           // unlabelled, as the operation threw it
  std::exception_ptr first_error_labelled;  // as that operation's handles rethrow it
  std::string first_failed;                 // "allreduce of bucket 3"

  Slot& slot(uint32_t i) { return slots[i]; }

  // Invariant (under mu): a slot is on the free stack iff status == free.
  void release_if_unused(uint32_t i) {
    Slot& s = slots[i];
    if (s.refs == 0 && s.status == OpStatus::done) {
      s.status = OpStatus::free;
      s.error = nullptr;
      free_slots[free_count++] = i;
      changed.notify_all();
    }
  }
};

}  // namespace progress_detail

using progress_detail::EngineState;
using progress_detail::OpArgs;
using progress_detail::OpKind;
using progress_detail::OpStatus;
using progress_detail::Slot;

namespace {

const char* kind_name(OpKind k) {
  switch (k) {
    case OpKind::allreduce:
      return "allreduce";
    case OpKind::reduce_scatter:
      return "reduce_scatter";
    case OpKind::allgather:
      return "allgather";
    case OpKind::broadcast:
      return "broadcast";
    case OpKind::reduce:
      return "reduce";
    case OpKind::barrier:
      return "barrier";
    case OpKind::task:
      return "task";
  }
  return "operation";
}

// The label ("allreduce of bucket 3"), else the call and its submission number
// ("allreduce #12", "task #13").
std::string describe(const Slot& s) {
  std::string text;
  if (s.args.label.name) {
    text = s.args.label.name;
    if (s.args.label.index >= 0) {
      text += ' ';
      text += std::to_string(s.args.label.index);
    }
  } else {
    text = kind_name(s.args.kind);
    text += " #";
    text += std::to_string(s.ticket);
  }
  return text;
}

// `e` again, of the same type, with `prefix` before its message; exceptions of types
// braid does not know keep their type and message as they are.
std::exception_ptr relabel(const std::exception_ptr& e, const std::string& prefix) {
  try {
    std::rethrow_exception(e);
  } catch (const CollectiveMismatch& x) {
    return std::make_exception_ptr(CollectiveMismatch(prefix + x.what(), x.where()));
  } catch (const AuthError& x) {
    return std::make_exception_ptr(AuthError(prefix + x.what(), x.where()));
  } catch (const PeerError& x) {
    return std::make_exception_ptr(PeerError(prefix + x.what(), x.where()));
  } catch (const TimeoutError& x) {
    return std::make_exception_ptr(TimeoutError(prefix + x.what(), x.where()));
  } catch (const IoError& x) {
    return std::make_exception_ptr(IoError(prefix + x.what(), x.where()));
  } catch (const Error& x) {
    return std::make_exception_ptr(Error(prefix + x.what(), x.where()));
  } catch (...) {
    return e;
  }
}

void execute(Slot& s, Group& g) {
  const OpArgs& a = s.args;
  switch (a.kind) {
    case OpKind::allreduce:
      return allreduce(g, a.data, a.count, a.dtype, a.op, a.options);
    case OpKind::reduce_scatter:
      return reduce_scatter(g, a.send, a.data, a.count, a.dtype, a.op, a.options);
    case OpKind::allgather:
      return allgather(g, a.send, a.data, a.count, a.dtype, a.options);
    case OpKind::broadcast:
      return broadcast(g, a.data, a.count, a.dtype, a.root, a.options);
    case OpKind::reduce:
      return reduce(g, a.data, a.count, a.dtype, a.op, a.root, a.options);
    case OpKind::barrier:
      return barrier(g, a.options);
    case OpKind::task:
      return s.task.run(s.storage, g);
  }
}

void destroy_task(Slot& s) {
  if (s.has_task) s.task.destroy(s.storage);
  s.has_task = false;
}

// Fails queued slot `s` without running it, because the operation `first_failed` failed
// with `first` (under mu).
void fail_unrun(EngineState& st, Slot& s, Clock::time_point now) {
  s.error = relabel(st.first_error,
                    describe(s) + " was not run: " + st.first_failed + " failed before it: ");
  s.times.started = s.times.finished = now;
  s.status = OpStatus::done;
  destroy_task(s);
}

void progress_loop(EngineState& st, Group& g) {
  std::unique_lock lock(st.mu);
  for (;;) {
    st.work.wait(lock, [&] { return st.queued > 0 || st.stopping; });
    if (st.queued == 0) break;  // stopping, and everything submitted has run
    const uint32_t i = st.queue[st.head];
    st.head = (st.head + 1) % st.queue.size();
    --st.queued;
    Slot& s = st.slot(i);
    s.status = OpStatus::running;
    s.times.started = Clock::now();
    lock.unlock();

    // The slot's arguments are not written while it runs: no lock needed to read them.
    std::exception_ptr error;
    try {
      execute(s, g);
    } catch (...) {
      error = std::current_exception();
    }
    std::string what;
    if (error) what = describe(s);  // allocates outside the lock, and only on failure

    lock.lock();
    s.times.finished = Clock::now();
    destroy_task(s);
    if (error) {
      st.first_error = error;
      st.first_failed = std::move(what);
      s.error = relabel(error, st.first_failed + " failed: ");
      st.first_error_labelled = s.error;
      log_debug("progress engine: ", st.first_failed, " failed; failing ", st.queued,
                " queued operation(s) behind it");
      for (; st.queued > 0; --st.queued) {
        const uint32_t j = st.queue[st.head];
        st.head = (st.head + 1) % st.queue.size();
        fail_unrun(st, st.slot(j), s.times.finished);
        st.release_if_unused(j);
      }
    }
    s.status = OpStatus::done;
    st.release_if_unused(i);
    st.changed.notify_all();
    if (st.first_error) break;  // the group is unusable: nothing more will run
  }
  st.thread_exited = true;
  st.changed.notify_all();
}

}  // namespace

// ---- Handle ----

Handle::Handle(std::shared_ptr<EngineState> state, uint32_t slot)
    : state_(std::move(state)), slot_(slot) {}

Handle::Handle(const Handle& other) : state_(other.state_), slot_(other.slot_) {
  if (state_) {
    std::lock_guard lock(state_->mu);
    ++state_->slot(slot_).refs;
  }
}

Handle::Handle(Handle&& other) noexcept : state_(std::move(other.state_)), slot_(other.slot_) {}

Handle& Handle::operator=(const Handle& other) {
  if (this != &other) *this = Handle(other);
  return *this;
}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    slot_ = other.slot_;
  }
  return *this;
}

Handle::~Handle() { release(); }

void Handle::release() noexcept {
  if (!state_) return;
  {
    std::lock_guard lock(state_->mu);
    --state_->slot(slot_).refs;
    state_->release_if_unused(slot_);
  }
  state_.reset();
}

void Handle::wait() const {
  if (!state_) return;
  std::unique_lock lock(state_->mu);
  const Slot& s = state_->slot(slot_);
  if (s.status != OpStatus::done && std::this_thread::get_id() == state_->thread_id)
    BRAID_THROW(Error, "Handle::wait on the progress engine's own thread for ", describe(s),
                ", which cannot run before the waiting task ends; wait from another thread");
  state_->changed.wait(lock, [&] { return s.status == OpStatus::done; });
  if (s.error) std::rethrow_exception(s.error);
}

bool Handle::test() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  const Slot& s = state_->slot(slot_);
  if (s.status != OpStatus::done) return false;
  if (s.error) std::rethrow_exception(s.error);
  return true;
}

bool Handle::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->slot(slot_).status == OpStatus::done;
}

std::exception_ptr Handle::error() const {
  if (!state_) return nullptr;
  std::lock_guard lock(state_->mu);
  return state_->slot(slot_).error;
}

OpTimes Handle::times() const {
  if (!state_) return {};
  std::lock_guard lock(state_->mu);
  return state_->slot(slot_).times;
}

// ---- ProgressEngine ----

namespace {

// Asks the scheduler for a short time slice for the calling thread (Linux 6.12+, EEVDF;
// unprivileged). The progress thread runs in bursts of tens of microseconds beside
// compute threads that never sleep; with the default slice a woken progress thread waits
// for the compute thread's slice to run out (up to milliseconds) before it may start a
// bucket's allreduce, while with a short one it runs at once. Older kernels refuse or
// ignore the request, which changes nothing else.
void request_short_slice() {
#ifdef SYS_sched_setattr
  struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
  } attr{};
  attr.size = sizeof attr;  // SCHED_ATTR_SIZE_VER0
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, 0);  // keep this thread's nice value
  if (errno != 0) return;
  attr.nice = nice;
  attr.policy = 0;         // SCHED_OTHER
  attr.runtime = 100'000;  // the slice: 100 us, the smallest allowed
  (void)::syscall(SYS_sched_setattr, 0, &attr, 0);
#endif
}

}  // namespace

ProgressEngine::ProgressEngine(std::shared_ptr<Group> group, ProgressEngineOptions options)
    : group_(std::move(group)) {
  BRAID_CHECK(group_ != nullptr, "ProgressEngine: null group");
  BRAID_CHECK(options.max_operations >= 1 && options.max_operations <= (size_t{1} << 20),
              "ProgressEngine: max_operations must be in [1, 2^20], got ", options.max_operations);
  state_ = std::make_shared<EngineState>(options.max_operations);
  EngineState* st = state_.get();
  Group* g = group_.get();
  std::unique_lock lock(st->mu);  // publishes thread_id before the thread looks at anything
  thread_ = std::thread([st, g] {
    pthread_setname_np(pthread_self(), "braid-progress");
    request_short_slice();
    progress_loop(*st, *g);
  });
  st->thread_id = thread_.get_id();
}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->work.notify_one();
  thread_.join();
}

bool ProgressEngine::failed() const {
  std::lock_guard lock(state_->mu);
  return state_->first_error != nullptr;
}

std::exception_ptr ProgressEngine::first_error() const {
  std::lock_guard lock(state_->mu);
  return state_->first_error_labelled;
}

bool ProgressEngine::stopped() const {
  std::lock_guard lock(state_->mu);
  return state_->thread_exited;
}

namespace {

// Takes a free slot for a new operation and resets its state; the caller fills in its
// arguments (under mu). Waits while every slot is busy but some operation is still to finish.
uint32_t take_slot(EngineState& st, std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (st.free_count > 0) break;
    bool any_unfinished = false;
    for (const Slot& s : st.slots) any_unfinished = any_unfinished || s.status != OpStatus::done;
    BRAID_CHECK(any_unfinished, "ProgressEngine: all ", st.slots.size(),
                " operation slots are held by handles of finished operations; let handles "
                "go (or reassign them) once waited for, or raise "
                "ProgressEngineOptions::max_operations");
    st.changed.wait(lock);
  }
  const uint32_t i = st.free_slots[--st.free_count];
  Slot& s = st.slot(i);
  s.status = OpStatus::queued;
  s.refs = 1;
  s.ticket = ++st.tickets;
  s.error = nullptr;
  s.times = OpTimes{};
  s.times.submitted = Clock::now();
  return i;
}

// Queues slot i, or fails it at once when the group is already unusable (under mu).
void enqueue(EngineState& st, uint32_t i) {
  Slot& s = st.slot(i);
  if (st.first_error || st.thread_exited) {
    if (!st.first_error) {
      // Only the destructor stops the thread without an error; submitting then is a bug.
      s.error = std::make_exception_ptr(
          Error(describe(s) + " was submitted after its progress engine stopped"));
      s.times.started = s.times.finished = Clock::now();
      s.status = OpStatus::done;
      destroy_task(s);
    } else {
      fail_unrun(st, s, Clock::now());
    }
    return;
  }
  st.queue[(st.head + st.queued) % st.queue.size()] = i;
  ++st.queued;
  st.work.notify_one();
}

}  // namespace

namespace {

// Takes a slot, fills it in and queues it; the caller wraps the index in a Handle, whose
// reference the slot already counts.
uint32_t submit_op(EngineState& st, const OpArgs& a, const ProgressEngine::Task* task) {
  std::unique_lock lock(st.mu);
  const uint32_t i = take_slot(st, lock);
  Slot& s = st.slot(i);
  s.args = a;
  if (task) {
    s.task = *task;
    task->construct(s.storage, task->source);
    s.has_task = true;
  }
  enqueue(st, i);
  return i;
}

}  // namespace

Handle ProgressEngine::iallreduce(void* data, size_t count, DType dtype, ReduceOp op, OpLabel label,
                                  const CollectiveOptions& options) {
  OpArgs a{OpKind::allreduce, label, nullptr, data, count, dtype, op, 0, options};
  return Handle(state_, submit_op(*state_, a, nullptr));
}

Handle ProgressEngine::ireduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                       ReduceOp op, OpLabel label,
                                       const CollectiveOptions& options) {
  OpArgs a{OpKind::reduce_scatter, label, send, recv, count, dtype, op, 0, options};
  return Handle(state_, submit_op(*state_, a, nullptr));
}

Handle ProgressEngine::iallgather(const void* send, void* recv, size_t count, DType dtype,
                                  OpLabel label, const CollectiveOptions& options) {
  OpArgs a{OpKind::allgather, label, send, recv, count, dtype, ReduceOp::sum, 0, options};
  return Handle(state_, submit_op(*state_, a, nullptr));
}

Handle ProgressEngine::ibroadcast(void* data, size_t count, DType dtype, int root, OpLabel label,
                                  const CollectiveOptions& options) {
  OpArgs a{OpKind::broadcast, label, nullptr, data, count, dtype, ReduceOp::sum, root, options};
  return Handle(state_, submit_op(*state_, a, nullptr));
}

Handle ProgressEngine::ireduce(void* data, size_t count, DType dtype, ReduceOp op, int root,
                               OpLabel label, const CollectiveOptions& options) {
  OpArgs a{OpKind::reduce, label, nullptr, data, count, dtype, op, root, options};
  return Handle(state_, submit_op(*state_, a, nullptr));
}

Handle ProgressEngine::ibarrier(OpLabel label, const CollectiveOptions& options) {
  OpArgs a;
  a.kind = OpKind::barrier;
  a.label = label;
  a.options = options;
  return Handle(state_, submit_op(*state_, a, nullptr));
}

Handle ProgressEngine::submit_task(OpLabel label, const Task& task) {
  OpArgs a;
  a.label = label;
  return Handle(state_, submit_op(*state_, a, &task));
}

}  // namespace braid::comm
