// Secret: generation from the OS, hex, text a person supplied and files. Messages never
// echo the secret itself, only where it came from and what is wrong with it.
#include "comm/secret.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace braid::comm {

namespace {

constexpr size_t kGeneratedBytes = 32;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string trimmed(const std::string& s) {
  const char* ws = " \t\r\n";
  const size_t first = s.find_first_not_of(ws);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(ws) - first + 1);
}

// How to make a good secret, with tools every machine has.
constexpr char kHowToMake[] =
    "make one with `openssl rand -hex 32` (or `od -An -tx1 -N32 /dev/urandom | tr -d ' \\n'`)";

// A secret a person supplied must be long enough not to be guessed.
void check_length(const Secret& s, const std::string& where) {
  if (s.bytes().size() >= Secret::kMinBytes) return;
  BRAID_THROW(Error, where, " is ", s.bytes().size(), " bytes (", 2 * s.bytes().size(),
              " hex digits); a job's secret needs at least ", Secret::kMinBytes, " random bytes (",
              2 * Secret::kMinBytes, " hex digits): ", kHowToMake);
}

}  // namespace

Secret Secret::generate() {
  Secret s;
  s.bytes_.resize(kGeneratedBytes);
  size_t done = 0;
  while (done < s.bytes_.size()) {
    const ssize_t n = ::getrandom(s.bytes_.data() + done, s.bytes_.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      BRAID_THROW(IoError,
                  "getrandom failed while making the job's secret: ", std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return s;
}

Secret Secret::from_hex(const std::string& hex) {
  if (hex.size() % 2 != 0)
    BRAID_THROW(Error, "secret: ", hex.size(),
                " hex digits is an odd number; a secret is hex bytes (e.g. from `openssl rand "
                "-hex 32`)");
  Secret s;
  s.bytes_.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = hex_value(hex[i]), lo = hex_value(hex[i + 1]);
    if (hi < 0 || lo < 0)
      BRAID_THROW(Error, "secret: the character at position ", hi < 0 ? i : i + 1,
                  " is not a hex digit");
    s.bytes_.push_back(static_cast<uint8_t>(hi << 4 | lo));
  }
  return s;
}

Secret Secret::from_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    BRAID_THROW(IoError, "secret file '", path, "': cannot open it: ", std::strerror(errno));
  std::string text;
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  // A pipe or /dev/stdin has no meaningful mode; a regular file shared with other users
  // gives the job to all of them.
  if (stat_ok && S_ISREG(st.st_mode) && (st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    BRAID_THROW(Error, "secret file '", path, "' has mode ", mode,
                ": other users on this machine can ", (st.st_mode & 044) ? "read" : "change",
                " it and so join the job; make it private with `chmod 600 ", path, "`");
  }
  // A secret is a few dozen bytes; more than this is not a secret file.
  constexpr size_t kMaxFileBytes = 64 << 10;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      BRAID_THROW(IoError, "secret file '", path, "': cannot read it: ", std::strerror(err));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxFileBytes) {
      ::close(fd);
      BRAID_THROW(Error, "secret file '", path, "' is over ", kMaxFileBytes,
                  " bytes; it should hold one secret in hex (", kHowToMake, ")");
    }
  }
  ::close(fd);
  const std::string hex = trimmed(text);
  if (hex.empty())
    BRAID_THROW(Error, "secret file '", path, "' is empty; it should hold hex bytes (", kHowToMake,
                ")");
  Secret s;
  try {
    s = from_hex(hex);
  } catch (const Error& e) {
    BRAID_THROW(Error, "secret file '", path, "': ", e.what());
  }
  check_length(s, "the secret in file '" + path + "'");
  return s;
}

Secret Secret::from_supplied_hex(const std::string& text, const std::string& where) {
  Secret s;
  try {
    s = from_hex(trimmed(text));
  } catch (const Error& e) {
    BRAID_THROW(Error, where, ": ", e.what());
  }
  check_length(s, "the secret in " + where);
  return s;
}

std::string Secret::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes_.size() * 2);
  for (uint8_t b : bytes_) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

}  // namespace braid::comm
