// A process-wide table of kernel choices (which GEMM library for a shape, which
// convolution algorithm for a geometry): looked up on every call under a shared lock,
// decided once per key under an exclusive one, so ranks running as threads share one
// choice per key and never time each other. `Choice` has a `key()` returning `Key` and an
// `origin` (ChoiceOrigin).
//
// A key the table does not hold is decided by the process-wide OnMiss (set_on_miss; the
// trainer sets it for its job, train/job_kernels.h):
//  - measure: time the candidates, use and keep the fastest. Only a process alone may:
//    two processes timing the same key can pick differently.
//  - rule: a fixed rule of the key, nothing timed: every process, run and world size
//    decides alike (deterministic mode).
//  - rule_and_measure: the rule decides, so the ranks of a job agree, and the timing is
//    kept aside (measured()) for the kernel cache, which later jobs start from.
// Whatever was timed in this process is also in measured().
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <vector>

namespace braid {

enum class OnMiss : uint8_t { measure, rule, rule_and_measure };

inline std::atomic<OnMiss>& on_miss_setting() {
  static std::atomic<OnMiss> setting{OnMiss::measure};
  return setting;
}
inline OnMiss on_miss() { return on_miss_setting().load(std::memory_order_relaxed); }
inline void set_on_miss(OnMiss policy) {
  on_miss_setting().store(policy, std::memory_order_relaxed);
}

// How the choice in use was made: timed in this process, by the fixed rule, or given
// (a record, the kernel cache, rank 0's table).
enum class ChoiceOrigin : uint8_t { timed, rule, given };

inline const char* choice_origin_name(ChoiceOrigin origin) {
  switch (origin) {
    case ChoiceOrigin::timed:
      return "timed";
    case ChoiceOrigin::rule:
      return "rule";
    case ChoiceOrigin::given:
      break;
  }
  return "given";
}

template <typename Key, typename Choice>
class ChoiceTable {
 public:
  std::optional<Choice> find(const Key& key) const {
    const std::shared_lock lock(mutex_);
    const auto it = choices_.find(key);
    if (it == choices_.end()) return std::nullopt;
    return it->second;
  }
  // The choice of `key`; when none is held yet, decided by on_miss() from `measure()` (a
  // Choice timed on the candidates) and `rule()` (the fixed rule's Choice), at most once
  // per key, while every other lookup waits.
  template <typename Measure, typename Rule>
  Choice find_or_choose(const Key& key, Measure measure, Rule rule) {
    const std::unique_lock lock(mutex_);
    if (const auto it = choices_.find(key); it != choices_.end()) return it->second;
    const OnMiss policy = on_miss();
    Choice choice;
    if (policy != OnMiss::rule) {
      Choice timed = measure();
      timed.origin = ChoiceOrigin::timed;
      measured_.emplace(key, timed);
      choice = timed;
    }
    if (policy != OnMiss::measure) {
      choice = rule();
      choice.origin = ChoiceOrigin::rule;
    }
    choices_.emplace(key, choice);
    return choice;
  }
  std::vector<Choice> all() const { return values(choices_); }
  // Every choice timed in this process, whether or not it is the one in use.
  std::vector<Choice> measured() const { return values(measured_); }
  // Records these choices, replacing those of the same keys.
  void set(std::span<const Choice> choices) {
    const std::unique_lock lock(mutex_);
    for (const Choice& c : choices) choices_[c.key()] = c;
  }
  // Records these choices for keys without one; a choice already in use stays.
  void add(std::span<const Choice> choices) {
    const std::unique_lock lock(mutex_);
    for (const Choice& c : choices) choices_.emplace(c.key(), c);
  }
  void clear() {
    const std::unique_lock lock(mutex_);
    choices_.clear();
    measured_.clear();
  }

 private:
  std::vector<Choice> values(const std::map<Key, Choice>& from) const {
    const std::shared_lock lock(mutex_);
    std::vector<Choice> out;
    out.reserve(from.size());
    for (const auto& [key, choice] : from) out.push_back(choice);
    return out;
  }

  mutable std::shared_mutex mutex_;
  std::map<Key, Choice> choices_;
  std::map<Key, Choice> measured_;  // timed here, in use or not
};

}  // namespace braid
