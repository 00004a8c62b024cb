// How a parameter-server push crosses the wire (strategies ps and fedavg): each worker
// encodes its gradient (fedavg: its change) of a server's key range with the job's
// compression.codec, keeps what the encoding lost in an error-feedback memory of that range
// and adds it to its next push; the server decodes the range before its optimizer applies
// it. Pulls stay fp32: they carry parameters, not increments, and nothing would feed back
// what a lossy pull lost.
//
// The encodings are the codecs' ChunkEncoders (compressed_allreduce.h), fixed-size for a
// range, so a server knows how many bytes a push holds:
//   bf16, fp16  CastEncoder (codec_cast.h): 2 bytes a float, with error feedback;
//   int8        Int8Encoder (codec_int8.h): a byte a float and a scale per int8_chunk;
//   sign        SignEncoder (codec_sign.h): a bit a float and a scale per sign_chunk;
//   topk        TopkEncoder (codec_topk.h): topk_ratio of the floats as (index, value),
//               without DGC's momentum correction or warm-up (refused when asked for).
// powersgd and onebit_adam are refused: PowerSGD's factors are allreduced among the
// workers, whom a parameter server keeps apart, and 1-bit Adam's optimizer runs on the
// worker, where a server's does.
#pragma once

#include <memory>

#include "parallel/codec.h"
#include "parallel/compressed_allreduce.h"

namespace braid::parallel {

// The push encoding of `config.name`; null for none (fp32 as it is). Throws braid::Error
// naming why for a codec (or a knob) a push cannot honour.
std::unique_ptr<ChunkEncoder> make_push_encoder(const CodecConfig& config);

}  // namespace braid::parallel
