// make_codec: the config's `compression.codec` to a codec object.
#include <algorithm>

#include "core/error.h"
#include "parallel/codec.h"
#include "parallel/codec_cast.h"
#include "parallel/codec_int8.h"
#include "parallel/codec_onebit_adam.h"
#include "parallel/codec_powersgd.h"
#include "parallel/codec_sign.h"
#include "parallel/codec_topk.h"
#include "parallel/ps_push_codec.h"

namespace braid::parallel {
namespace {

[[noreturn]] void throw_unknown_codec(const std::string& name) {
  std::string known;
  for (const std::string& each : codec_names()) known += (known.empty() ? "" : ", ") + each;
  BRAID_THROW(Error, "compression codec '", name, "' does not exist; the codecs are ", known);
}

}  // namespace

const std::vector<std::string>& codec_names() {
  static const std::vector<std::string> names = {"none", "bf16", "fp16",     "int8",
                                                 "sign", "topk", "powersgd", "onebit_adam"};
  return names;
}

std::unique_ptr<GradientCodec> make_codec(const CodecConfig& config) {
  const std::string& n = config.name;
  if (n == "none" || n == "fp32") return std::make_unique<CastCodec>(DType::f32);
  if (n == "bf16") return std::make_unique<CastCodec>(DType::bf16);
  if (n == "fp16") return std::make_unique<CastCodec>(DType::f16);
  if (n == "int8") return make_int8_codec(config);
  if (n == "sign") return make_sign_codec(config);
  if (n == "topk") return std::make_unique<TopkCodec>(config);
  if (n == "powersgd") return std::make_unique<PowerSgdCodec>(config);
  if (n == "onebit_adam")
    return std::make_unique<OnebitAdamCodec>(config.freeze_step, config.beta1, config.beta2,
                                             config.eps);
  throw_unknown_codec(n);
}

std::unique_ptr<ChunkEncoder> make_push_encoder(const CodecConfig& config) {
  const std::string& n = config.name;
  if (n == "none" || n == "fp32") return nullptr;
  if (n == "bf16") return std::make_unique<CastEncoder>(DType::bf16);
  if (n == "fp16") return std::make_unique<CastEncoder>(DType::f16);
  if (n == "int8")
    return std::make_unique<Int8Encoder>(config.int8_chunk, config.stochastic_rounding,
                                         config.seed);
  if (n == "sign") return std::make_unique<SignEncoder>(config.sign_chunk);
  if (n == "topk") {
    BRAID_CHECK(config.topk_momentum == 0 && config.warmup_steps == 0,
                "compression.codec topk under a parameter server sends plain error-feedback "
                "top-k: the servers' optimizer keeps the momentum, and a push's size is fixed by "
                "its range; set compression.topk_momentum 0 and compression.topk_warmup_steps 0 "
                "(now ",
                config.topk_momentum, " and ", config.warmup_steps, ")");
    return std::make_unique<TopkEncoder>(config.topk_ratio);
  }
  BRAID_CHECK(n != "powersgd",
              "compression.codec powersgd allreduces its factors among the workers, whom a "
              "parameter server keeps apart; under strategy ps or fedavg use bf16, fp16, int8, "
              "sign or topk");
  BRAID_CHECK(n != "onebit_adam",
              "compression.codec onebit_adam pairs with an optimizer on the worker; a parameter "
              "server runs the optimizer itself; under strategy ps or fedavg use bf16, fp16, "
              "int8, sign or topk");
  throw_unknown_codec(n);
}

}  // namespace braid::parallel
