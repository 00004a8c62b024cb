// The words an error uses to name the rank whose missing progress caused it ("no progress
// from job rank 3"), so that whoever reads only the error line (the launcher, a person
// scanning logs) can blame that rank rather than the one that gave up waiting. Ranks are the
// job's (transport) ranks, not a sub-group's.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace braid::comm {

// "no progress from job rank N"
std::string no_progress_from(int job_rank);
// The rank named by the last no_progress_from phrase in `line`, if any.
std::optional<int> find_no_progress(std::string_view line);

}  // namespace braid::comm
