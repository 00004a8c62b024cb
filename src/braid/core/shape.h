// A tensor's dimensions: up to kMaxDims sizes, stored inline (no allocation).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace braid {

class Shape {
 public:
  static constexpr int kMaxDims = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i < 0 ? i + rank_ : i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i < 0 ? i + rank_ : i)]; }
  int64_t numel() const;
  std::vector<int64_t> to_vector() const { return {dims_.begin(), dims_.begin() + rank_}; }
  std::string str() const;  // "[128, 784]"

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Shape& s);

}  // namespace braid
