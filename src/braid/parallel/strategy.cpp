#include "parallel/strategy.h"

namespace braid::parallel {

Strategy::~Strategy() = default;

}  // namespace braid::parallel
