// Splits one rank's output stream into whole lines and hands each batch of complete lines,
// every line prefixed (e.g. "[rank 2] "), to a sink in one call, so the launcher never
// writes half a line of one rank between lines of another. A line longer than `max_line`
// bytes is passed on in pieces rather than buffered without bound. It remembers the line
// that says why the writer failed, so the launcher can repeat a failed rank's error when
// it ends the job.
//
// Not thread-safe: one prefixer per stream, fed by one thread.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace braid::launch {

class OutputPrefixer {
 public:
  using Sink = std::function<void(std::string_view)>;
  OutputPrefixer(std::string prefix, Sink sink, size_t max_line = size_t{64} << 10);

  // Passes on every line completed by `data`; keeps the unfinished rest.
  void feed(std::string_view data);
  // End of stream: passes on an unfinished last line with a newline added.
  void finish();

  // The last line passed on that was not blank, without the prefix, cut to kLastLineBytes.
  const std::string& last_line() const { return last_line_; }
  // The line that says why the writer failed: the last error line braid's main prints
  // ("braid: error: ...", "braid: I/O error: ...", "braid: timeout: ...", "braid: internal
  // error: ...") even when something followed it (CLI11's "Run with --help for more
  // information."), else the last line that was not blank. Cut to kLastLineBytes.
  const std::string& error_line() const { return error_line_.empty() ? last_line_ : error_line_; }
  static constexpr size_t kLastLineBytes = 2048;

 private:
  void emit_line(std::string& batch, std::string_view line);

  std::string prefix_;
  Sink sink_;
  size_t max_line_;
  std::string pending_;  // the unfinished line so far
  std::string last_line_;
  std::string error_line_;  // the last of braid's error lines, if any
};

// A Sink writing to a file descriptor (all of it, retrying on EINTR). Errors such as
// EPIPE (the reader went away) drop the output: supervising the ranks matters more.
OutputPrefixer::Sink fd_sink(int fd);

}  // namespace braid::launch
