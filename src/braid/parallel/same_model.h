// Before any gradient is exchanged every rank must hold the same model: each parameter's
// name, shape and place in the flat buffer, hashed and allgathered, so a different model
// or config is an error naming both ranks at once on every rank, not a hang later.
#pragma once

#include <string_view>

#include "nn/params.h"

namespace braid::comm {
class Group;
}

namespace braid::parallel {

// Collective: every rank of `group` calls it. `who` names the strategy in the error.
void check_same_model(comm::Group& group, const nn::ParamSet& params, std::string_view who);

}  // namespace braid::parallel
