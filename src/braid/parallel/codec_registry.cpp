// make_codec: the config's `compression.codec` to a codec object.
#include <algorithm>

#include "core/error.h"
#include "parallel/codec.h"
#include "parallel/codec_cast.h"
#include "parallel/codec_powersgd.h"

namespace braid::parallel {

const std::vector<std::string>& codec_names() {
  static const std::vector<std::string> names = {"none", "bf16", "fp16", "powersgd"};
  return names;
}

std::unique_ptr<GradientCodec> make_codec(const CodecConfig& config) {
  const std::string& n = config.name;
  if (n == "none" || n == "fp32") return std::make_unique<CastCodec>(DType::f32);
  if (n == "bf16") return std::make_unique<CastCodec>(DType::bf16);
  if (n == "fp16") return std::make_unique<CastCodec>(DType::f16);
  if (n == "powersgd") return std::make_unique<PowerSgdCodec>(config);
  std::string known;
  for (const std::string& name : codec_names()) known += (known.empty() ? "" : ", ") + name;
  BRAID_THROW(Error, "compression codec '", n, "' does not exist; the codecs are ", known);
}

}  // namespace braid::parallel
