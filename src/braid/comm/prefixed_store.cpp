// prefixed(): a Store view whose keys live under "prefix/" of another store.
#include <vector>

#include "comm/store.h"

namespace braid::comm {

namespace {

class PrefixedStore : public Store {
 public:
  PrefixedStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix) + "/") {}
  using Store::get;
  using Store::set;
  void set(const std::string& key, std::span<const uint8_t> value) override {
    base_->set(prefix_ + key, value);
  }
  Bytes get(const std::string& key, Deadline deadline) override {
    return base_->get(prefix_ + key, deadline);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return base_->add(prefix_ + key, delta);
  }
  Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                    std::span<const uint8_t> desired) override {
    return base_->compare_set(prefix_ + key, expected, desired);
  }
  void wait(std::span<const std::string> keys, Deadline deadline) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    base_->wait(full, deadline);
  }
  bool remove(const std::string& key) override { return base_->remove(prefix_ + key); }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace

std::shared_ptr<Store> prefixed(std::shared_ptr<Store> base, const std::string& prefix) {
  return std::make_shared<PrefixedStore>(std::move(base), prefix);
}

}  // namespace braid::comm
