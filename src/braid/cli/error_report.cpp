#include "cli/error_report.h"

#include <cstdio>

#include "core/error.h"
#include "core/log.h"

namespace braid::cli {
namespace {

// The exception object already printed: a rethrown exception is the same object.
const std::exception* g_printed = nullptr;

struct Kind {
  int code;
  const char* prefix;
};

Kind kind_of(const std::exception& e) {
  if (dynamic_cast<const TimeoutError*>(&e)) return {3, "timeout: "};
  if (dynamic_cast<const IoError*>(&e)) return {2, "I/O error: "};
  if (dynamic_cast<const Error*>(&e)) return {1, "error: "};
  return {70, "internal error: "};
}

int print(const std::exception& e) {
  const Kind kind = kind_of(e);
  std::fprintf(stderr, "braid: %s%s\n", kind.prefix, e.what());
  std::fflush(stderr);
  if (const auto* b = dynamic_cast<const Error*>(&e); b != nullptr && !b->where().empty())
    log_debug("raised at ", b->where());
  return kind.code;
}

}  // namespace

int report_error(const std::exception& e) {
  return g_printed == &e ? kind_of(e).code : print(e);  // printed already: the code is left
}

void report_error_now(const std::exception& e) {
  if (g_printed == &e) return;
  print(e);
  g_printed = &e;
}

}  // namespace braid::cli
