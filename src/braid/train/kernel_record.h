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
//              "onednn_transposed_us": 33.9}, ...],
//    "conv": [{"geometry": [128, 28, 28, 1, 32, 3, 1, 0], "precision": "fp32",
//              "algorithm": "direct",
//              "gemm_us": 9100.0, "direct_us": 4200.0}, ...]}
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace braid::train {

// This process's choices now.
nlohmann::json kernel_record();
// Records a record's choices as this process's; an error naming `source` and the entry
// when one is malformed (nothing is applied then).
void apply_kernel_record(const nlohmann::json& record, const std::string& source);
// Applies the record at `path`: a run directory or checkpoint (its state.json), or a JSON
// file holding a record. IoError when there is none.
void apply_kernel_record_at(const std::string& path);
// "GEMM: 12 shapes (12 timed on this CPU): oneDNN for 7, OpenBLAS for 5; convolution: ..."
std::string describe_kernel_choices();

}  // namespace braid::train
