#include "comm/blame.h"

#include <charconv>

namespace braid::comm {
namespace {
constexpr std::string_view kPhrase = "no progress from job rank ";
}

std::string no_progress_from(int job_rank) {
  return std::string(kPhrase) + std::to_string(job_rank);
}

std::optional<int> find_no_progress(std::string_view line) {
  const size_t at = line.rfind(kPhrase);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view digits = line.substr(at + kPhrase.size());
  int rank = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
  if (ec != std::errc() || end == digits.data() || rank < 0) return std::nullopt;
  return rank;
}

}  // namespace braid::comm
