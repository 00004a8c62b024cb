#include "cli/error_report.h"

#include <cstdio>

#include "core/error.h"
#include "core/log.h"

namespace braid::cli {
namespace {

// The exception object already printed: a rethrown exception is the same object.
const std::exception* g_printed = nullptr;

int print(const std::exception& e) {
  int code = 70;
  const char* kind = "internal error: ";
  if (dynamic_cast<const TimeoutError*>(&e)) {
    code = 3;
    kind = "timeout: ";
  } else if (dynamic_cast<const IoError*>(&e)) {
    code = 2;
    kind = "I/O error: ";
  } else if (dynamic_cast<const Error*>(&e)) {
    code = 1;
    kind = "error: ";
  }
  std::fprintf(stderr, "braid: %s%s\n", kind, e.what());
  std::fflush(stderr);
  if (const auto* b = dynamic_cast<const Error*>(&e); b != nullptr && !b->where().empty())
    log_debug("raised at ", b->where());
  return code;
}

}  // namespace

int report_error(const std::exception& e) {
  if (g_printed == &e) {
    // Printed already: only the code is left to give.
    if (dynamic_cast<const TimeoutError*>(&e)) return 3;
    if (dynamic_cast<const IoError*>(&e)) return 2;
    if (dynamic_cast<const Error*>(&e)) return 1;
    return 70;
  }
  return print(e);
}

void report_error_now(const std::exception& e) {
  if (g_printed == &e) return;
  print(e);
  g_printed = &e;
}

}  // namespace braid::cli
