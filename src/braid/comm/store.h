// The rendezvous store: a small key-value service through which the ranks of a job find
// each other (addresses, shm names) and agree on small facts. Same shape as PyTorch
// c10d's Store: set, get (waits for the key), add, compare_set, wait, remove.
//
// Implementations: MemoryStore (in this process, for ranks as threads), and the TCP
// client returned by connect_store(), whose server is StoreServer (hosted by rank 0 or
// `braid store`). Every method is thread-safe. Waits end with TimeoutError naming the
// keys and the time waited; a lost server connection is an IoError.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/deadline.h"

namespace braid::comm {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, std::span<const uint8_t> value) = 0;
  // The value of `key`, waiting until some rank sets it.
  virtual Bytes get(const std::string& key, Deadline deadline) = 0;
  // Adds `delta` to the integer stored at `key` (absent = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if its value equals `expected` (an empty `expected` matches
  // an absent key); returns the value stored afterwards.
  virtual Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                            std::span<const uint8_t> desired) = 0;
  // Returns when every key exists.
  virtual void wait(std::span<const std::string> keys, Deadline deadline) = 0;
  // Removes `key`; true if it existed.
  virtual bool remove(const std::string& key) = 0;

  // Conveniences over the byte API.
  void set(const std::string& key, const std::string& value) {
    set(key,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
  }
  std::string get_string(const std::string& key, Deadline deadline) {
    const Bytes b = get(key, deadline);
    return std::string(b.begin(), b.end());
  }
};

// A store with its keys under "prefix/": sub-groups and repeated rendezvous use one each
// so their keys never collide. Does not own `base`'s lifetime beyond the shared_ptr.
std::shared_ptr<Store> prefixed(std::shared_ptr<Store> base, const std::string& prefix);

}  // namespace braid::comm
