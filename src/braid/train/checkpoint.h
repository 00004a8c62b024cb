// Checkpoints: a directory holding
//
//   model.safetensors      every parameter under its ParamSet layout name, then the named
//                          buffers (BatchNorm's running stats; num_batches_tracked is I64
//                          of shape []), exactly PyTorch's state_dict names, shapes and
//                          dtypes, so torch's load_state_dict accepts the file unchanged
//   optimizer.safetensors  the optimizer's named state tensors, as the caller gives them
//   ema.safetensors        only with a weight average: the averaged weights and buffers,
//                          named as in model.safetensors (so PyTorch loads them alike)
//   state.json             the commit record: {"format": "braid-checkpoint", "version": 1,
//                          "files": {name: {"bytes": n, "xxh64": hex}}, "train_state": ...}
//
// Every file is replaced atomically (train/atomic_file.h). Saving first removes
// state.json and writes it last, so at any moment the directory either holds a complete
// checkpoint or lacks its commit record; and since the record holds each file's size and
// XXH64, a directory mixing files from two saves is refused on load rather than resumed
// with inconsistent state.
//
// The full logical layout is stored (no padding, no sharding), so a checkpoint loads into
// any world size or strategy. Loading verifies everything before it changes the model: a
// failed load leaves the ParamSet as it was.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/params.h"
#include "train/safetensors.h"

namespace braid::train {

inline constexpr int kCheckpointVersion = 1;
inline constexpr char kCheckpointFormat[] = "braid-checkpoint";

// The model's state as PyTorch names it: parameters (views into the flat buffer, no
// padding) followed by the named buffers. Valid while `params` lives.
std::vector<NamedTensor> state_dict(const nn::ParamSet& params);

// Copies `file`'s tensors into the parameters and buffers after checking that names,
// shapes and dtypes match exactly; otherwise throws one Error that lists every missing,
// unexpected and mismatched tensor, prefixed by `source` (e.g. "checkpoint 'x/model.safetensors'").
void load_state_dict(const SafetensorsFile& file, nn::ParamSet& params, const std::string& source);
// The same checks and copy for any named targets (a weight average's tensors).
void copy_named_tensors(const std::vector<NamedTensor>& from,
                        const std::vector<NamedTensor>& targets, const std::string& source);

// Writes the checkpoint into `dir` (created if needed), replacing any checkpoint there.
// `averaged_model`, when given, goes to ema.safetensors.
void save_checkpoint(const std::string& dir, const nn::ParamSet& params,
                     const std::vector<NamedTensor>& optimizer_state,
                     const nlohmann::json& train_state,
                     const std::vector<NamedTensor>* averaged_model = nullptr);

struct LoadedCheckpoint {
  nlohmann::json train_state;                // as given to save_checkpoint
  std::vector<NamedTensor> optimizer_state;  // in the order given to save_checkpoint
  std::vector<NamedTensor> averaged_model;   // empty when the checkpoint has no average
};

// Verifies the files against state.json, then loads the weights and buffers into `params`.
LoadedCheckpoint load_checkpoint(const std::string& dir, nn::ParamSet& params);

// The checkpoint directory a user means by `path`: `path` itself when it holds state.json,
// or the run directory's `path/checkpoint`. When neither exists but a save's siblings
// survive (`checkpoint.previous`, `checkpoint.partial`: a crash between the renames of a
// save), the error names each with its step and says to pass it instead: which one to
// continue from is the user's call, as the older one repeats steps the metrics already hold.
// IoError when nothing is there.
std::string find_checkpoint_dir(const std::string& path);

// The "train_state" object of `dir`/state.json, after the same format checks as
// load_checkpoint; the data files are not read.
nlohmann::json read_train_state(const std::string& dir);

// Loads weights alone from one safetensors file (a braid model.safetensors or one saved
// from PyTorch's state_dict), with the same checks as load_checkpoint.
void load_model_weights(const std::string& safetensors_path, nn::ParamSet& params);

}  // namespace braid::train
