// "Did you mean ...?": the closest of a list of names to a misspelt one, for errors about
// unknown config keys and flags.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace braid::train {

// Edit distance (insertions, deletions, substitutions and swaps of neighbours).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, or empty when none is close: within a third of the
// word's length in edits (at least 1, at most 3), or one of the two a prefix of the other
// (at least 3 characters: "batchsize" -> "batch").
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace braid::train
