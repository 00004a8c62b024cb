// OutputPrefixer: a pending partial line plus one sink call per fed chunk.
#include "launch/output_prefixer.h"

#include <unistd.h>

#include <cerrno>

namespace braid::launch {

OutputPrefixer::OutputPrefixer(std::string prefix, Sink sink, size_t max_line)
    : prefix_(std::move(prefix)), sink_(std::move(sink)), max_line_(max_line == 0 ? 1 : max_line) {}

namespace {

// The one line braid's main prints when a command fails (cli/main.cpp).
bool is_braid_error(std::string_view line) {
  for (const std::string_view kind :
       {"braid: error: ", "braid: I/O error: ", "braid: timeout: ", "braid: internal error: "})
    if (line.starts_with(kind)) return true;
  return false;
}

}  // namespace

void OutputPrefixer::emit_line(std::string& batch, std::string_view line) {
  batch += prefix_;
  batch += line;
  batch += '\n';
  if (line.find_first_not_of(" \t\r") != std::string_view::npos)
    last_line_.assign(line.substr(0, kLastLineBytes));
  if (is_braid_error(line)) error_line_.assign(line.substr(0, kLastLineBytes));
}

void OutputPrefixer::feed(std::string_view data) {
  std::string batch;
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(data);
      break;
    }
    if (pending_.empty()) {
      emit_line(batch, data.substr(0, nl));
    } else {
      pending_.append(data.substr(0, nl));
      emit_line(batch, pending_);
      pending_.clear();
    }
    data.remove_prefix(nl + 1);
  }
  while (pending_.size() >= max_line_) {
    emit_line(batch, std::string_view(pending_).substr(0, max_line_));
    pending_.erase(0, max_line_);
  }
  if (!batch.empty()) sink_(batch);
}

void OutputPrefixer::finish() {
  if (pending_.empty()) return;
  std::string batch;
  emit_line(batch, pending_);
  pending_.clear();
  sink_(batch);
}

OutputPrefixer::Sink fd_sink(int fd) {
  return [fd](std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = ::write(fd, s.data(), s.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      s.remove_prefix(static_cast<size_t>(n));
    }
  };
}

}  // namespace braid::launch
