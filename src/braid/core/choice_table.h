// A process-wide table of measured choices (which GEMM library for a shape, which
// convolution algorithm for a geometry): looked up on every call under a shared lock,
// measured once per key under an exclusive one, so ranks running as threads share one
// choice per key and never time each other. `Choice` has a `key()` returning `Key`.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <vector>

namespace braid {

template <typename Key, typename Choice>
class ChoiceTable {
 public:
  std::optional<Choice> find(const Key& key) const {
    const std::shared_lock lock(mutex_);
    const auto it = choices_.find(key);
    if (it == choices_.end()) return std::nullopt;
    return it->second;
  }
  // The choice of `key`, from `measure()` when none is recorded yet (run at most once per
  // key, while every other lookup waits).
  template <typename Measure>
  Choice find_or_measure(const Key& key, Measure measure) {
    const std::unique_lock lock(mutex_);
    if (const auto it = choices_.find(key); it != choices_.end()) return it->second;
    const Choice choice = measure();
    choices_.emplace(key, choice);
    return choice;
  }
  std::vector<Choice> all() const {
    const std::shared_lock lock(mutex_);
    std::vector<Choice> out;
    out.reserve(choices_.size());
    for (const auto& [key, choice] : choices_) out.push_back(choice);
    return out;
  }
  // Records these choices, replacing those of the same keys.
  void set(std::span<const Choice> choices) {
    const std::unique_lock lock(mutex_);
    for (const Choice& c : choices) choices_[c.key()] = c;
  }
  void clear() {
    const std::unique_lock lock(mutex_);
    choices_.clear();
  }

 private:
  mutable std::shared_mutex mutex_;
  std::map<Key, Choice> choices_;
};

}  // namespace braid
