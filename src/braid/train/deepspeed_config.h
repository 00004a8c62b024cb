// A DeepSpeed config (ds_config.json, https://www.deepspeed.ai/docs/config-json/) mapped
// onto braid's config keys (settings.h), as `braid train --deepspeed FILE` lays them over
// --config. Pure: JSON in, JSON and notes out, nothing read or run, so each rule is tested
// alone.
//
// The batch: DeepSpeed's train_batch_size = train_micro_batch_size_per_gpu x
// gradient_accumulation_steps x data-parallel ranks, where gradient_accumulation_steps
// counts micro-batches run one after another. braid's `batch` is per rank and its
// `accumulate_steps` cuts that batch into micro-batches, so batch = micro x gas and
// accumulate_steps = gas. Two of the three derive the third as DeepSpeed does; all three
// must agree.
//
// Every key either maps onto a braid key, is listed as changing nothing in braid (accepted
// with a note), or is refused with an Error naming the file, the key and what braid offers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace braid::train {

struct DeepSpeedMapping {
  nlohmann::json config = nlohmann::json::object();  // braid keys: {"batch": 16, ...}
  std::vector<std::string> notes;                    // one line per key accepted as a no-op
};

// Maps `ds` (a DeepSpeed config's JSON) for a job of `data_world` data-parallel ranks.
// `source` names the file in errors. Throws braid::Error on a key braid cannot honour, a
// wrong type, or a batch whose three sizes disagree.
DeepSpeedMapping map_deepspeed_config(const nlohmann::json& ds, int64_t data_world,
                                      const std::string& source);

// Reads `path` (IoError when unreadable, Error when not JSON) and maps it.
DeepSpeedMapping load_deepspeed_config(const std::string& path, int64_t data_world);

}  // namespace braid::train
