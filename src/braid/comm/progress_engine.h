// Asynchronous collectives (docs/ARCHITECTURE.md, "Asynchronous communication"): a
// ProgressEngine owns one thread that runs the collectives submitted on a group, one after
// another in submission order, while the submitting (compute) thread goes on working; each
// submission returns at once with a Handle whose wait() returns when the operation is done
// or rethrows its error. DDP starts a bucket's allreduce here as soon as backward has
// finished the bucket's layers.
//
// Ordering: operations run strictly in the order they were submitted, so ranks that submit
// the same sequence agree on every collective's sequence number, as with blocking calls.
//
// Errors: a failed operation's exception reaches every handle of it, with its type kept
// (PeerError, TimeoutError, CollectiveMismatch, braid::Error, ...) and the operation's
// label in front of the message ("allreduce of bucket 3 failed: ..."). After a failure the
// group is unusable: the operations queued behind it, and every later submission, fail at
// once with the first error (same type, naming both operations), and the thread exits.
// wait() never outlasts the failing operation's deadline: every collective waits with the
// group's deadline (or its options' timeout) and the thread completes or fails every
// queued operation.
//
// Allocation: none per operation in the steady state. Operations live in a fixed pool of
// slots made in the constructor (ProgressEngineOptions::max_operations); their arguments
// are a small struct; a label is a static string plus an index, formatted only on error;
// a submit() task is stored inside its slot (at most kTaskBytes, checked at compile time).
//
// Thread safety: submissions and handles may be used from any thread. While an engine
// lives it owns its group and the group's transport: only its thread may call
// collectives, split() or p2p on the group or on any group sharing the transport (the
// axes of a mesh: run theirs as submit()ted tasks on this engine; never make a second
// engine on the same transport), and allocate_shared() must be a submit()ted task. The
// compute thread submits and waits; it may read rank() and size() of the group. Before
// the engine is made, and after it is destroyed, the caller's thread may drive the group
// again. A group with an MPI backend needs MPI initialised with MPI_THREAD_SERIALIZED or
// more.
//
// Lifetime: buffers passed to an operation must stay valid and untouched until it is
// done. Handles may outlive the engine (they share its slot pool). Destroying the engine
// runs the operations still queued (so this rank stays in step with its peers) or fails
// them after a failure, then joins the thread. A peer that has stopped taking part costs
// it at most one deadline: the operation waiting on that peer times out and the rest fail
// with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>

#include "comm/collectives.h"
#include "comm/deadline.h"
#include "comm/group.h"
#include "core/dtype.h"
#include "core/reduce.h"

namespace braid::comm {

// What an operation is called in errors: `name` (a string with static lifetime, such as a
// literal) and, when index >= 0, a number: {"allreduce of bucket", 3} reads "allreduce of
// bucket 3". Unlabelled operations are called by their call and submission number
// ("allreduce #12").
struct OpLabel {
  const char* name = nullptr;
  int64_t index = -1;
  OpLabel() = default;
  OpLabel(const char* n, int64_t i = -1) : name(n), index(i) {}  // NOLINT: implicit on purpose
};

// When an operation was submitted, began to run and finished, on the steady clock, for
// timelines and for "communication not hidden by compute". A time not reached yet is
// Clock::time_point{} (an operation failed without running has started == finished).
struct OpTimes {
  Clock::time_point submitted{};
  Clock::time_point started{};
  Clock::time_point finished{};
};

struct ProgressEngineOptions {
  // Operations that may be queued, running, or done but still referenced by a Handle, at
  // once. Submitting past it waits for a slot while some operation is still running and
  // throws braid::Error when every slot is held by a live handle of a finished operation.
  size_t max_operations = 256;
};

namespace progress_detail {
struct EngineState;
}

// One submitted operation. A cheap value: copies refer to the same operation; a
// default-constructed Handle refers to none (done, nothing to wait for). While a handle
// of an operation lives, its slot, result and times are kept.
class Handle {
 public:
  Handle() = default;
  Handle(const Handle& other);
  Handle(Handle&& other) noexcept;
  Handle& operator=(const Handle& other);
  Handle& operator=(Handle&& other) noexcept;
  ~Handle();

  // Blocks until the operation is done; rethrows its error (type kept, label in the
  // message). Throws braid::Error when called on the engine's own thread for an operation
  // that is not done (it would wait for itself).
  void wait() const;
  // Non-blocking: true once the operation succeeded, false while it is queued or running;
  // rethrows its error once it failed.
  bool test() const;
  // Non-blocking and never throws: true once the operation finished, successfully or not.
  bool done() const;
  // The operation's error once it failed; null while it runs or when it succeeded.
  std::exception_ptr error() const;
  // The operation's timestamps so far (complete once done()).
  OpTimes times() const;

 private:
  friend class ProgressEngine;
  Handle(std::shared_ptr<progress_detail::EngineState> state, uint32_t slot);
  void release() noexcept;

  std::shared_ptr<progress_detail::EngineState> state_;
  uint32_t slot_ = 0;
};

class ProgressEngine {
 public:
  // Bytes a submit() task may occupy (its captures); capture pointers to anything larger.
  static constexpr size_t kTaskBytes = 64;

  // Starts the progress thread; from now on it alone drives `group`.
  explicit ProgressEngine(std::shared_ptr<Group> group, ProgressEngineOptions options = {});
  // Runs (or, after a failure, fails) what is queued, then joins the thread.
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // The collectives of comm/collectives.h, run on the progress thread; the arguments have
  // the same meaning.
  [[nodiscard]] Handle iallreduce(void* data, size_t count, DType dtype, ReduceOp op,
                                  OpLabel label = {}, const CollectiveOptions& options = {});
  [[nodiscard]] Handle ireduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                       ReduceOp op, OpLabel label = {},
                                       const CollectiveOptions& options = {});
  [[nodiscard]] Handle iallgather(const void* send, void* recv, size_t count, DType dtype,
                                  OpLabel label = {}, const CollectiveOptions& options = {});
  [[nodiscard]] Handle ibroadcast(void* data, size_t count, DType dtype, int root,
                                  OpLabel label = {}, const CollectiveOptions& options = {});
  [[nodiscard]] Handle ireduce(void* data, size_t count, DType dtype, ReduceOp op, int root,
                               OpLabel label = {}, const CollectiveOptions& options = {});
  [[nodiscard]] Handle ibarrier(OpLabel label = {}, const CollectiveOptions& options = {});

  // Runs fn(Group&) on the progress thread in submission order: for anything the typed
  // calls do not cover (a split, allocate_shared, a sequence of point-to-point calls). It
  // must bound its waits by the group's deadline, like the collectives. Stored in the
  // operation's slot, so it allocates nothing itself.
  template <typename F>
  [[nodiscard]] Handle submit(OpLabel label, F&& fn) {
    using T = std::decay_t<F>;
    static_assert(sizeof(T) <= kTaskBytes && alignof(T) <= alignof(std::max_align_t),
                  "ProgressEngine::submit: the task is too large to store inline; capture "
                  "pointers or references instead of values");
    static_assert(std::is_invocable_v<T&, Group&>, "ProgressEngine::submit: fn(Group&) needed");
    static_assert(std::is_nothrow_move_constructible_v<T>,
                  "ProgressEngine::submit: the task must be nothrow move constructible");
    T local(std::forward<F>(fn));  // moved into the slot under the engine's lock
    Task task;
    task.construct = [](void* dst, void* src) noexcept {
      new (dst) T(std::move(*static_cast<T*>(src)));
    };
    task.run = [](void* p, Group& g) { (*static_cast<T*>(p))(g); };
    task.destroy = [](void* p) noexcept { static_cast<T*>(p)->~T(); };
    task.source = std::addressof(local);
    return submit_task(label, task);
  }

  // True once an operation failed (the group is unusable); that operation's error, as its
  // handles rethrow it ("allreduce of bucket 3 failed: ..."), or null.
  bool failed() const;
  std::exception_ptr first_error() const;
  // True once the progress thread has exited (after a failure, or in the destructor).
  bool stopped() const;

  struct Task {
    void (*construct)(void* dst, void* src) noexcept = nullptr;
    void (*run)(void* task, Group& g) = nullptr;
    void (*destroy)(void* task) noexcept = nullptr;
    void* source = nullptr;  // the caller's callable, moved into the slot
  };

 private:
  Handle submit_task(OpLabel label, const Task& task);

  std::shared_ptr<Group> group_;
  std::shared_ptr<progress_detail::EngineState> state_;
  std::thread thread_;
};

}  // namespace braid::comm
