#include "core/error.h"

#include <cstring>

namespace braid::detail {

void throw_error(const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  throw Error(message, concat(base ? base + 1 : file, ":", line));
}

}  // namespace braid::detail
