// Errors in tiers: braid::Error for bad input and broken promises (with file:line),
// IoError for disk and network, TimeoutError for deadlines. Library code throws; only
// main() turns an error into an exit code and one line for the user.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace braid {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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

// Throws braid::Error("file:line: <message>") unless cond holds. The message is only
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

// Always throws ErrorType with the concatenated message (no file:line: these are for
// errors a user reads, e.g. "fashion-mnist/train-images.gz: truncated at byte 17").
#define BRAID_THROW(ErrorType, ...) throw ErrorType(::braid::detail::concat(__VA_ARGS__))
