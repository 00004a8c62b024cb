#include "train/job_kernels.h"

#include <cstring>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "core/log.h"
#include "train/kernel_cache.h"
#include "train/kernel_record.h"

namespace braid::train {
namespace {

// Rank 0's tables on every rank of `world`: its record as JSON text, broadcast.
void take_rank0_tables(comm::Group& world) {
  std::string text;
  if (world.rank() == 0) text = kernel_choices_json({gemm_choices(), nn::conv_choices()}).dump();
  int64_t bytes = static_cast<int64_t>(text.size());
  comm::broadcast(world, &bytes, 1, DType::i64, 0);
  std::vector<int32_t> words(static_cast<size_t>((bytes + 3) / 4), 0);
  if (world.rank() == 0) std::memcpy(words.data(), text.data(), text.size());
  comm::broadcast(world, words.data(), words.size(), DType::i32, 0);
  if (world.rank() == 0) return;
  text.assign(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(bytes));
  const KernelChoices choices =
      parse_kernel_choices(nlohmann::json::parse(text), "rank 0's kernel choices");
  set_gemm_choices(choices.gemm);
  nn::set_conv_choices(choices.conv);
}

}  // namespace

void start_job_kernels(const TrainConfig& config, comm::Group* world) {
  const bool alone = world == nullptr || world->size() == 1;
  const bool cache = !kernel_cache_dir().empty();
  set_on_miss(config.deterministic ? OnMiss::rule
              : alone              ? OnMiss::measure
              : cache              ? OnMiss::rule_and_measure
                                   : OnMiss::rule);
  if ((alone || world->rank() == 0) && !config.deterministic && cache) {
    const KernelChoices cached = read_kernel_cache();
    add_gemm_choices(cached.gemm);
    nn::add_conv_choices(cached.conv);
    if (!cached.gemm.empty() || !cached.conv.empty())
      log_info("kernel cache ", kernel_cache_path(), ": ", cached.gemm.size(), " GEMM shapes, ",
               cached.conv.size(), " convolution geometries");
  }
  if (!config.kernel_choices.empty()) apply_kernel_record_at(config.kernel_choices);
  if (!alone) take_rank0_tables(*world);
}

}  // namespace braid::train
