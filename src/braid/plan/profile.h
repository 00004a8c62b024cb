// A model as `braid plan` sees it: its units in forward order (nn::Module::pipeline_units:
// a chain's layers, the GPT's embedding, blocks and head; a model that cannot be cut is one
// unit), each with its time, parameters and memory, measured on this machine by running
// the unit.
//
// Time: each unit's forward and backward are run at two micro-batch sizes (medians of
// alternated repeats, after an untimed first pass so first touch of memory is excluded)
// and fitted as fixed + per_sample x micro-batch, so the simulator can ask any size.
// Memory: the bytes a unit's forward keeps for its backward (its cache's tensors, counted
// by core/memory.h's accounting between the forward and the cache's release) per sample,
// and the bytes of its output per sample (what a pipeline stage boundary sends).
// GPT blocks are alike: one is measured and stands for all. Under tensor parallelism a
// GPT block's slice of width T is measured as it runs (nn::TpGptBlock) with a reducer
// that sums nothing but counts the bytes a real one would sum, so its compute and its
// messages are both measured, not divided.
//
// A profile is saved as JSON (the model spec, the CPU, the thread count and the units), so
// a plan reruns without measuring: `braid plan --profile FILE`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan/codec_profile.h"

namespace braid::plan {

// seconds = fixed + per_sample x samples
struct LinearTime {
  double fixed = 0;
  double per_sample = 0;
  double at(double samples) const { return fixed + per_sample * samples; }
};

struct TensorSlice {
  int width = 1;  // T
  LinearTime forward, backward;
  double params = 0;  // this slice's parameters on one rank
  // Bytes of the sums a rank joins per sample in forward and in backward (each sum is an
  // allreduce over the T ranks), and how many sums per micro-batch.
  double forward_sum_bytes_per_sample = 0, backward_sum_bytes_per_sample = 0;
  int forward_sums = 0, backward_sums = 0;
};

struct UnitProfile {
  std::string name;  // "h.3", "0"
  std::string kind;  // "GptBlock", "Linear"
  LinearTime forward, backward;
  double params = 0;  // parameters it declares (tied ones counted where declared)
  double activation_bytes_per_sample = 0;  // kept by forward for backward
  double output_bytes_per_sample = 0;      // its output: what a stage boundary sends
  std::vector<TensorSlice> slices;         // tensor-parallel widths measured (GPT only)
};

struct ModelProfile {
  nlohmann::json model;  // the spec as given ("gpt-small", an object, "gpt:d_model=...")
  std::string cpu;       // core/cpu.h's description of where it was measured
  int threads = 1;       // BLAS threads it ran with
  int64_t seq_len = 0;   // tokens a sample (language models), 0 otherwise
  std::vector<UnitProfile> units;
  // Adam's update per parameter (fp32, fused over the flat buffer), measured.
  double optimizer_s_per_param = 0;
  double sample_bytes = 0;           // one input sample as loaded
  std::vector<CodecProfile> codecs;  // lossy gradient codecs measured here (int8, powersgd)

  double params() const;
  bool cuttable() const { return units.size() > 1; }
  // The widths tensor parallelism was measured at (1 always; a GPT's divisors of its heads
  // up to 8).
  std::vector<int> tensor_widths() const;
};

struct ProfileOptions {
  int64_t seq_len = 128;                        // language models: tokens a sample
  std::vector<int64_t> micro_batches = {1, 4};  // the two sizes fitted
  int repeats = 3;
  std::vector<int> tensor_widths = {2, 4, 8};  // measured where the model allows
  bool codecs = true;                          // also measure_codecs()
};

// Builds the model (`spec` as train/model_spec.h takes it, or "gpt:d_model=D,layers=L,
// heads=H[,context=C][,vocab=V]" for a GPT of any size: only one block is built) and
// measures it on the calling thread with the current BLAS thread count.
ModelProfile measure_profile(const nlohmann::json& spec, const ProfileOptions& options = {});

nlohmann::json profile_json(const ModelProfile& p);
ModelProfile parse_profile(const nlohmann::json& j, const std::string& where);

}  // namespace braid::plan
