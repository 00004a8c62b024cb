#include "train/kernel_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>

#include "core/checksum.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/log.h"
#include "train/atomic_file.h"

namespace braid::train {
namespace {

using nlohmann::json;

std::mutex g_mutex;
// All guarded by g_mutex.
std::string g_dir;
std::set<GemmShape> g_saved_gemm;  // measurements known to be in the cache
std::set<nn::ConvKey> g_saved_conv;
std::set<std::string> g_warned;

void warn_once(const std::string& message) {
  const std::lock_guard lock(g_mutex);
  if (g_warned.insert(message).second) log_warn(message);
}

enum class FileState { absent, usable, corrupt, newer };

struct CacheFile {
  FileState state = FileState::absent;
  json choices = {{"gemm", json::array()}, {"conv", json::array()}};
  KernelChoices parsed;
  std::string problem;  // why it is not usable
};

CacheFile bad(FileState state, std::string problem) {
  CacheFile f;
  f.state = state;
  f.problem = std::move(problem);
  return f;
}

CacheFile read_file(const std::string& path, const std::string& machine) {
  std::ifstream in(path);
  if (!in) return {};
  json file;
  try {
    file = json::parse(in);
  } catch (const json::exception& e) {
    return bad(FileState::corrupt, std::string("is not JSON (") + e.what() + ")");
  }
  if (!file.is_object() || file.value("magic", json()) != kKernelCacheMagic)
    return bad(FileState::corrupt,
               std::string("does not start with the magic '") + kKernelCacheMagic + "'");
  const json version = file.value("version", json());
  if (!version.is_number_integer()) return bad(FileState::corrupt, "has no version");
  if (version.get<int>() > kKernelCacheVersion)
    return bad(FileState::newer, detail::concat("is version ", version.get<int>(),
                                                ", written by a newer braid (this one reads ",
                                                kKernelCacheVersion, ")"));
  if (version.get<int>() < kKernelCacheVersion)
    return bad(FileState::corrupt, detail::concat("is version ", version.get<int>()));
  if (file.value("machine", json()) != machine)
    return bad(FileState::corrupt, "was timed on another machine or library build");
  if (!file.contains("choices") || !file["choices"].is_object())
    return bad(FileState::corrupt, "holds no choices");
  const std::optional<uint64_t> sum = parse_hex64(file.value("xxh64", std::string()));
  const std::string text = file["choices"].dump();
  if (!sum || *sum != xxh64(text.data(), text.size()))
    return bad(FileState::corrupt, "fails its checksum (xxh64)");
  CacheFile f;
  try {
    f.parsed = parse_kernel_choices(file["choices"], "kernel cache '" + path + "'");
  } catch (const Error& e) {
    return bad(FileState::corrupt, std::string("holds a bad entry: ") + e.what());
  }
  f.state = FileState::usable;
  f.choices = file["choices"];
  for (const char* kind : {"gemm", "conv"})
    if (!f.choices.contains(kind)) f.choices[kind] = json::array();
  return f;
}

// An exclusive flock on `path` for the object's lifetime; none where the file system has no
// locks (then two ranks saving at once may drop one's additions, which are timed again).
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

void set_kernel_cache_dir(std::string dir) {
  const std::lock_guard lock(g_mutex);
  g_dir = std::move(dir);
  g_saved_gemm.clear();
  g_saved_conv.clear();
}

std::string kernel_cache_dir() {
  const std::lock_guard lock(g_mutex);
  return g_dir;
}

std::string kernel_cache_machine() { return cpu_description() + "; " + blas_config(); }

std::string kernel_cache_path() {
  const std::string dir = kernel_cache_dir();
  if (dir.empty()) return "";
  const std::string machine = kernel_cache_machine();
  return (std::filesystem::path(dir) /
          ("kernels-" + hex64(xxh64(machine.data(), machine.size())) + ".json"))
      .string();
}

KernelChoices read_kernel_cache() {
  const std::string path = kernel_cache_path();
  if (path.empty()) return {};
  const CacheFile f = read_file(path, kernel_cache_machine());
  if (f.state == FileState::corrupt)
    warn_once("kernel cache '" + path + "' " + f.problem +
              ": ignored; its kernels are timed again and the file rewritten");
  else if (f.state == FileState::newer)
    warn_once("kernel cache '" + path + "' " + f.problem +
              ": ignored and left alone; set BRAID_KERNEL_CACHE to another directory to keep "
              "one for this braid");
  if (f.state != FileState::usable) return {};
  log_debug("kernel cache '", path, "': ", f.parsed.gemm.size(), " GEMM shapes, ",
            f.parsed.conv.size(), " convolution geometries");
  return f.parsed;
}

int save_kernel_measurements() {
  const std::string path = kernel_cache_path();
  if (path.empty()) return 0;
  const std::vector<GemmChoice> gemm = gemm_measurements();
  const std::vector<nn::ConvChoice> conv = nn::conv_measurements();
  {
    const std::lock_guard lock(g_mutex);
    const bool all_saved =
        std::all_of(gemm.begin(), gemm.end(),
                    [](const GemmChoice& c) { return g_saved_gemm.contains(c.shape); }) &&
        std::all_of(conv.begin(), conv.end(),
                    [](const nn::ConvChoice& c) { return g_saved_conv.contains(c.key()); });
    if (all_saved) return 0;
  }
  int added = 0;
  try {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    const FileLock lock(path + ".lock");
    const std::string machine = kernel_cache_machine();
    CacheFile f = read_file(path, machine);
    if (f.state == FileState::newer) return 0;  // warned when read; left alone
    std::set<GemmShape> shapes;
    std::set<nn::ConvKey> geometries;
    for (const GemmChoice& c : f.parsed.gemm) shapes.insert(c.shape);
    for (const nn::ConvChoice& c : f.parsed.conv) geometries.insert(c.key());
    KernelChoices fresh;
    for (const GemmChoice& c : gemm)
      if (shapes.insert(c.shape).second) fresh.gemm.push_back(c);
    for (const nn::ConvChoice& c : conv)
      if (geometries.insert(c.key()).second) fresh.conv.push_back(c);
    added = static_cast<int>(fresh.gemm.size() + fresh.conv.size());
    if (added > 0) {
      const json entries = kernel_choices_json(fresh);
      for (const char* kind : {"gemm", "conv"})
        for (const json& e : entries[kind]) f.choices[kind].push_back(e);
      const std::string text = f.choices.dump();
      // The magic and version open the file.
      const nlohmann::ordered_json file = {{"magic", kKernelCacheMagic},
                                           {"version", kKernelCacheVersion},
                                           {"machine", machine},
                                           {"xxh64", hex64(xxh64(text.data(), text.size()))},
                                           {"choices", nlohmann::ordered_json::parse(text)}};
      write_file_atomic(path, file.dump(1) + "\n");
      log_debug("kernel cache '", path, "': ", added, " choices added");
    }
  } catch (const std::exception& e) {
    warn_once("kernel cache '" + path + "' not saved (" + e.what() +
              "); set BRAID_KERNEL_CACHE to a writable directory, or off");
    return 0;
  }
  const std::lock_guard lock(g_mutex);
  for (const GemmChoice& c : gemm) g_saved_gemm.insert(c.shape);
  for (const nn::ConvChoice& c : conv) g_saved_conv.insert(c.key());
  return added;
}

}  // namespace braid::train
