// Secret: generation from the OS, hex, files and the environment. Messages never echo the
// secret itself, only where it came from and what is wrong with it.
#include "comm/secret.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

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
  std::ifstream in(path, std::ios::binary);
  if (!in) BRAID_THROW(IoError, "secret file '", path, "': cannot open it: ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) BRAID_THROW(IoError, "secret file '", path, "': cannot read it");
  const std::string hex = trimmed(text.str());
  if (hex.empty())
    BRAID_THROW(Error, "secret file '", path, "' is empty; it should hold hex bytes");
  try {
    return from_hex(hex);
  } catch (const Error& e) {
    BRAID_THROW(Error, "secret file '", path, "': ", e.what());
  }
}

Secret Secret::from_environment() {
  // An empty variable counts as unset, so `BRAID_SECRET= cmd` clears an inherited one.
  if (const char* hex = std::getenv("BRAID_SECRET"); hex && *hex) {
    try {
      return from_hex(trimmed(hex));
    } catch (const Error& e) {
      BRAID_THROW(Error, "BRAID_SECRET: ", e.what());
    }
  }
  if (const char* path = std::getenv("BRAID_SECRET_FILE"); path && *path) {
    try {
      return from_file(path);
    } catch (const IoError& e) {
      BRAID_THROW(IoError, "BRAID_SECRET_FILE: ", e.what());
    } catch (const Error& e) {
      BRAID_THROW(Error, "BRAID_SECRET_FILE: ", e.what());
    }
  }
  return Secret();
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
