// The scaling report's plot (`braid plan scaling --svg FILE`).
#pragma once

#include <string>

#include "plan/scaling.h"

namespace braid::cli {

void write_scaling_svg(const plan::ScalingReport& r, const std::string& path);

}  // namespace braid::cli
