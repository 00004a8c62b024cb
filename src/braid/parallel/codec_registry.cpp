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

namespace braid::parallel {

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
  std::string known;
  for (const std::string& name : codec_names()) known += (known.empty() ? "" : ", ") + name;
  BRAID_THROW(Error, "compression codec '", n, "' does not exist; the codecs are ", known);
}

}  // namespace braid::parallel
