#include "comm/memory_store.h"

#include <charconv>
#include <string>

#include "core/error.h"

namespace braid::comm {

namespace {

int64_t parse_counter(const std::string& key, const Bytes& value) {
  int64_t v = 0;
  const char* first = reinterpret_cast<const char*>(value.data());
  const auto [end, ec] = std::from_chars(first, first + value.size(), v);
  BRAID_CHECK(ec == std::errc() && end == first + value.size(), "store key '", key,
              "' does not hold an integer, so add() cannot update it");
  return v;
}

std::string joined(std::span<const std::string> keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

}  // namespace

void MemoryStore::set(const std::string& key, std::span<const uint8_t> value) {
  {
    std::lock_guard lock(mutex_);
    values_[key] = Bytes(value.begin(), value.end());
  }
  changed_.notify_all();
}

Bytes MemoryStore::get(const std::string& key, Deadline deadline) {
  const std::string keys[] = {key};
  wait(keys, deadline);
  std::lock_guard lock(mutex_);
  return values_.at(key);
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t v = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = values_.find(key);
    if (it != values_.end()) v = parse_counter(key, it->second);
    v += delta;
    const std::string s = std::to_string(v);
    values_[key] = Bytes(s.begin(), s.end());
  }
  changed_.notify_all();
  return v;
}

Bytes MemoryStore::compare_set(const std::string& key, std::span<const uint8_t> expected,
                               std::span<const uint8_t> desired) {
  Bytes now;
  {
    std::lock_guard lock(mutex_);
    auto it = values_.find(key);
    const bool matches = it == values_.end()
                             ? expected.empty()
                             : Bytes(expected.begin(), expected.end()) == it->second;
    if (matches) values_[key] = Bytes(desired.begin(), desired.end());
    now = values_.count(key) ? values_[key] : Bytes{};
  }
  changed_.notify_all();
  return now;
}

void MemoryStore::wait(std::span<const std::string> keys, Deadline deadline) {
  std::unique_lock lock(mutex_);
  auto all_present = [&] {
    for (const auto& k : keys)
      if (!values_.count(k)) return false;
    return true;
  };
  if (deadline.is_never()) {
    changed_.wait(lock, all_present);
  } else if (!changed_.wait_until(lock, deadline.at(), all_present)) {
    BRAID_THROW(TimeoutError, "store: waited ", deadline.waited_seconds(), " s for ", joined(keys),
                " and they were not all set");
  }
}

bool MemoryStore::remove(const std::string& key) {
  std::lock_guard lock(mutex_);
  return values_.erase(key) > 0;
}

}  // namespace braid::comm
