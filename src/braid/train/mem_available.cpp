#include "train/mem_available.h"

#include <fstream>
#include <sstream>
#include <string>

namespace braid::train {

double mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream fields(line.substr(13));
    double kib = 0;
    fields >> kib;
    return kib * 1024.0;
  }
  return 0;
}

}  // namespace braid::train
