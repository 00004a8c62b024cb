#include "train/config_agreement.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "comm/collectives.h"
#include "comm/group.h"
#include "comm/store.h"
#include "core/checksum.h"
#include "core/error.h"
#include "train/settings.h"

namespace braid::train {
namespace {

std::map<std::string, std::string> as_map(const std::string& text) {
  std::map<std::string, std::string> m;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
    begin = end + 1;
  }
  return m;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  return text;
}

// Every rank's text, gathered in 8-byte words (the collectives move typed elements).
std::vector<std::string> gather_texts(comm::Group& world, const std::string& mine) {
  const auto n = static_cast<size_t>(world.size());
  const auto length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(n);
  comm::allgather(world, &length, lengths.data(), 1, DType::i64);
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const auto words = static_cast<size_t>((longest + 7) / 8);
  std::vector<int64_t> send(words, 0), recv(words * n, 0);
  std::memcpy(send.data(), mine.data(), mine.size());
  comm::allgather(world, send.data(), recv.data(), words, DType::i64);
  std::vector<std::string> texts(n);
  for (size_t r = 0; r < n; ++r)
    texts[r].assign(reinterpret_cast<const char*>(recv.data() + r * words),
                    static_cast<size_t>(lengths[r]));
  return texts;
}

}  // namespace

std::vector<std::string> agreed_settings(const TrainConfig& config) {
  std::vector<std::string> lines;
  for (const Setting& s : settings())
    if (!s.per_rank) lines.push_back(s.key + "=" + s.get(config).dump());
  return lines;
}

void check_same_config(comm::Group& world, const TrainConfig& config) {
  if (world.size() == 1) return;
  const std::string mine = joined(agreed_settings(config));
  const auto hash = static_cast<int64_t>(xxh64(mine.data(), mine.size()));
  std::vector<int64_t> hashes(static_cast<size_t>(world.size()));
  comm::allgather(world, &hash, hashes.data(), 1, DType::i64);
  if (std::all_of(hashes.begin(), hashes.end(), [&](int64_t h) { return h == hashes[0]; })) return;

  // Collective: every rank takes part, so every rank throws the same error.
  const std::vector<std::string> texts = gather_texts(world, mine);
  const std::map<std::string, std::string> reference = as_map(texts[0]);
  std::string differences;
  for (size_t r = 1; r < texts.size(); ++r) {
    if (hashes[r] == hashes[0]) continue;
    std::string keys;
    for (const auto& [key, value] : as_map(texts[r])) {
      const auto it = reference.find(key);
      const std::string& there = it == reference.end() ? std::string("(unset)") : it->second;
      if (there != value)
        keys += detail::concat(keys.empty() ? "" : ", ", key, " (rank 0: ", there, ", rank ", r,
                               ": ", value, ")");
    }
    differences +=
        detail::concat(differences.empty() ? "" : "; ", "rank ", r, " differs in ", keys);
  }
  std::string per_rank;
  for (const Setting& s : settings())
    if (s.per_rank) per_rank += (per_rank.empty() ? "" : ", ") + s.key;
  BRAID_THROW(Error, "the ranks of this job were started with different configs: ", differences,
              ". Start every rank with the same config and flags (only ", per_rank,
              " may differ between ranks)");
}

void check_config_of_job(comm::Store& store, const TrainConfig& config) {
  const std::string mine = joined(agreed_settings(config));
  const auto bytes = [](const std::string& t) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(t.data()), t.size());
  };
  const comm::Bytes stored = store.compare_set("elastic/config", {}, bytes(mine));
  const std::string job(stored.begin(), stored.end());
  if (job == mine) return;
  const std::map<std::string, std::string> reference = as_map(job);
  std::string keys;
  for (const auto& [key, value] : as_map(mine)) {
    const auto it = reference.find(key);
    const std::string& there = it == reference.end() ? std::string("(unset)") : it->second;
    if (there != value)
      keys += detail::concat(keys.empty() ? "" : ", ", key, " (the job: ", there,
                             ", this process: ", value, ")");
  }
  BRAID_THROW(Error, "this process was started with another config than the elastic job it joins: ",
              keys.empty() ? std::string("the settings differ") : keys,
              ". Start it with the job's config and flags; the job goes on without it");
}

}  // namespace braid::train
