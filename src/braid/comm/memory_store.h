// A Store inside one process, for ranks run as threads in tests. Thread-safe.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "comm/store.h"

namespace braid::comm {

class MemoryStore : public Store {
 public:
  using Store::get;
  using Store::set;
  void set(const std::string& key, std::span<const uint8_t> value) override;
  Bytes get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                    std::span<const uint8_t> desired) override;
  void wait(std::span<const std::string> keys, Deadline deadline) override;
  bool remove(const std::string& key) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> values_;
};

}  // namespace braid::comm
