#include "cli/relaunch.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace braid::cli {

void relaunch_as_ranks(int ranks, const std::string& transport) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
  BRAID_CHECK(!args.empty(), "cannot read /proc/self/cmdline to launch the ranks");
  const std::string self = "/proc/self/exe";
  std::vector<std::string> argv = {self, "launch", "-n", std::to_string(ranks)};
  if (transport != "auto") argv.insert(argv.end(), {"--transport", transport});
  argv.push_back("--");
  argv.push_back(self);
  argv.insert(argv.end(), args.begin() + 1, args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  ::execv(self.c_str(), cargv.data());
  BRAID_THROW(IoError, "cannot re-execute braid to launch ", ranks,
              " ranks: ", std::strerror(errno));
}

}  // namespace braid::cli
