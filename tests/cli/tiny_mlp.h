// The small MLP the CLI tests train: about 25,000 parameters, well under a millisecond a
// step at batch 16, so a run of 400 steps takes about a second.
#pragma once

#include <fstream>
#include <string>

#include "temp_dir.h"

namespace braid::testing {

// Writes the model spec into `tmp` and returns the flags of a run of it at a constant rate
// (the optimizer is the caller's to name).
inline std::string tiny_mlp_flags(const TempDir& tmp) {
  std::ofstream(tmp.file("tiny_mlp.json")) << R"({"input": [28, 28, 1], "layers": [
      {"type": "flatten"}, {"type": "linear", "out_features": 32}, {"type": "relu"},
      {"type": "linear", "out_features": 10}]})";
  return "--model " + tmp.file("tiny_mlp.json") +
         " --batch 16 --schedule constant --threads 1 --eval-batches 4 --log-every 100 ";
}

}  // namespace braid::testing
