// The run's kernel choices as a record: the GEMM library of each shape
// (core/gemm_choice.h) and the convolution algorithm of each geometry (nn/conv_choice.h).
// Written into each checkpoint's state.json under "kernels", applied again on --resume,
// and replayed from any run with `kernel_choices: PATH`, so a run's bits can be reproduced
// although its kernels are chosen by timing on the machine.
//
//   {"cpu": "AMD EPYC ...", "gemm_policy": "auto", "conv_policy": "auto",
//    "gemm": [{"m": 128, "n": 512, "k": 784, "trans_a": false, "trans_b": true,
//              "library": "onednn", "transposed": false, "openblas_us": 41.2,
//              "onednn_us": 35.1, "openblas_transposed_us": 44.0,
//              "onednn_transposed_us": 33.9, "origin": "timed"}, ...],
//    "conv": [{"geometry": [128, 28, 28, 1, 32, 3, 1, 0], "precision": "fp32",
//              "algorithm": "direct",
//              "gemm_us": 9100.0, "direct_us": 4200.0, "origin": "timed"}, ...]}
//
// "origin" says how the choice was made (timed here, by the fixed "rule", or "given": a
// record, the kernel cache, rank 0's table); times are 0 where nothing was timed. Reading
// a record takes the choices alone: their times and origin are not read back.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/gemm_choice.h"
#include "nn/conv_choice.h"

namespace braid::train {

struct KernelChoices {
  std::vector<GemmChoice> gemm;
  std::vector<nn::ConvChoice> conv;
};

// {"gemm": [...], "conv": [...]}: these choices as a record's entries.
nlohmann::json kernel_choices_json(const KernelChoices& choices);
// A record's "gemm" and "conv" entries as choices (origin given); an error naming `source`
// and the entry when one is malformed.
KernelChoices parse_kernel_choices(const nlohmann::json& record, const std::string& source);

// This process's choices now.
nlohmann::json kernel_record();
// Records a record's choices as this process's; an error naming `source` and the entry
// when one is malformed (nothing is applied then).
void apply_kernel_record(const nlohmann::json& record, const std::string& source);
// Applies the record at `path`: a run directory or checkpoint (its state.json), or a JSON
// file holding a record. IoError when there is none.
void apply_kernel_record_at(const std::string& path);
// "GEMM: 12 shapes (12 timed on this CPU, 0 by the fixed rule, the rest recorded or cached):
// oneDNN for 7, OpenBLAS for 5 (2 as C^T); convolution: direct for 1 of 2 geometries (...)"
std::string describe_kernel_choices();

}  // namespace braid::train
