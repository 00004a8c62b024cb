// Errors in tiers: braid::Error for bad input and broken promises, IoError for disk and
// network, TimeoutError for deadlines. Library code throws; only main() turns an error into
// an exit code and one line for the user. A check's source location travels beside the
// message (where()), not in it: users read what went wrong, developers ask for the
// location with BRAID_LOG=debug.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace braid {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::string where = {})
      : std::runtime_error(message), where_(std::move(where)) {}
  // "file.cpp:123" of the check that threw, or empty.
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

class IoError : public Error {
 public:
  using Error::Error;
};

class TimeoutError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

[[noreturn]] void throw_error(const char* file, int line, const std::string& message);

}  // namespace detail
}  // namespace braid

// Throws braid::Error(<message>, where = "file:line") unless cond holds. The message is only
// built on failure.
#define BRAID_CHECK(cond, ...)                                                                \
  do {                                                                                        \
    if (!(cond)) [[unlikely]]                                                                 \
      ::braid::detail::throw_error(__FILE__, __LINE__, ::braid::detail::concat(__VA_ARGS__)); \
  } while (0)

// Like BRAID_CHECK(a == b) but the message carries both values.
#define BRAID_CHECK_EQ(a, b, ...)                                                             \
  do {                                                                                        \
    const auto& braid_a_ = (a);                                                               \
    const auto& braid_b_ = (b);                                                               \
    if (!(braid_a_ == braid_b_)) [[unlikely]]                                                 \
      ::braid::detail::throw_error(                                                           \
          __FILE__, __LINE__,                                                                 \
          ::braid::detail::concat(#a " == " #b " failed (", braid_a_, " vs ", braid_b_, ") ", \
                                  ##__VA_ARGS__));                                            \
  } while (0)

// Always throws ErrorType with the concatenated message and no location: the message
// alone says where, e.g. "fashion-mnist/train-images.gz: truncated at byte 17".
#define BRAID_THROW(ErrorType, ...) throw ErrorType(::braid::detail::concat(__VA_ARGS__))
