#include "parallel/same_model.h"

#include <vector>

#include "comm/collectives.h"
#include "comm/group.h"
#include "core/checksum.h"

namespace braid::parallel {
namespace {

uint64_t layout_hash(const nn::ParamSet& params) {
  Xxh64Stream h;
  for (const nn::ParamInfo& p : params.layout()) {
    h.update(p.name.data(), p.name.size() + 1);
    for (int i = 0; i < p.shape.rank(); ++i) {
      const int64_t d = p.shape[i];
      h.update(&d, sizeof d);
    }
    h.update(&p.offset, sizeof p.offset);
  }
  const int64_t total = params.size();
  h.update(&total, sizeof total);
  return h.digest();
}

}  // namespace

void check_same_model(comm::Group& group, const nn::ParamSet& params, std::string_view who) {
  const int n = group.size();
  struct Summary {
    uint64_t hash;
    int64_t params;
  };
  const Summary mine{layout_hash(params), params.count()};
  std::vector<Summary> all(static_cast<size_t>(n));
  static_assert(sizeof(Summary) == 2 * sizeof(int64_t));
  comm::allgather(group, &mine, all.data(), 2, DType::i64);
  for (int r = 1; r < n; ++r) {
    const Summary& a = all[0];
    const Summary& b = all[static_cast<size_t>(r)];
    if (a.hash != b.hash || a.params != b.params)
      BRAID_THROW(Error, who, ": rank 0 and rank ", r, " hold different models (rank 0: ", a.params,
                  " parameters, layout hash ", hex64(a.hash), "; rank ", r, ": ", b.params,
                  " parameters, layout hash ", hex64(b.hash),
                  "); every rank must run the same model and config");
  }
}

}  // namespace braid::parallel
