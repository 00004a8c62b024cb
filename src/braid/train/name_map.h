// Renaming a state_dict's tensors as they are read (`braid train --init-from FILE --rename
// FROM=TO`): a PyTorch model names its layers by attribute ("fc1.weight"), a braid chain by
// position ("1.weight"). A rule renames every tensor whose name starts with FROM, putting
// TO in its place; where rules overlap, the longest FROM that matches applies, so the
// order they are given in (a JSON object has none) does not matter.
#pragma once

#include <string>
#include <vector>

#include "train/safetensors.h"

namespace braid::train {

struct RenameRule {
  std::string from, to;
};
using NameMap = std::vector<RenameRule>;

// Rules from "FROM=TO" arguments, or from a JSON file ({"FROM": "TO", ...}) for an argument
// that names one (ends in .json). An argument without '=' or an empty FROM is an error; so
// is a FROM given twice.
NameMap parse_name_map(const std::vector<std::string>& args);

// `tensors` with their names mapped. A rule that matches no tensor (a typo would otherwise
// pass unseen until the names fail to match) and two tensors given one name are errors
// naming `source`.
std::vector<NamedTensor> rename_tensors(std::vector<NamedTensor> tensors, const NameMap& map,
                                        const std::string& source);

}  // namespace braid::train
