#include "train/checkpoint.h"

#include <filesystem>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/checksum.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "train/atomic_file.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kAveragedModelFile = "ema.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr size_t kMaxStateBytes = 64u << 20;
constexpr size_t kMaxNamesListed = 10;

std::string join_path(const std::string& dir, const char* name) {
  return (fs::path(dir) / name).string();
}

// "'a', 'b', 'c' and 7 more": every name helps, but a thousand do not.
std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kMaxNamesListed; ++i)
    out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > kMaxNamesListed)
    out += " and " + std::to_string(names.size() - kMaxNamesListed) + " more";
  return out;
}

json read_state(const std::string& dir) {
  const std::string path = join_path(dir, kStateFile);
  if (!fs::exists(path))
    BRAID_THROW(Error, "checkpoint '", dir, "' has no ", kStateFile,
                ": it is not a checkpoint, or its save did not finish (", kStateFile,
                " is written last); use an earlier checkpoint");
  const MappedFile file(path);
  if (file.size() > kMaxStateBytes)
    BRAID_THROW(Error, "checkpoint '", path, "' is ", file.size(), " bytes, more than the ",
                kMaxStateBytes >> 20, " MiB a state file may hold: corrupt file");
  const char* text = reinterpret_cast<const char*>(file.data());
  json state;
  try {
    state = json::parse(text, text + file.size());
  } catch (const json::exception& e) {
    BRAID_THROW(Error, "checkpoint '", path, "' is not valid JSON (", e.what(), ")");
  }
  if (!state.is_object() || state.value("format", json()) != kCheckpointFormat)
    BRAID_THROW(Error, "checkpoint '", path,
                "' is not a braid checkpoint state file (no \"format\": \"", kCheckpointFormat,
                "\")");
  const json& version = state.value("version", json());
  if (!version.is_number_integer() || version.get<int64_t>() < 1)
    BRAID_THROW(Error, "checkpoint '", path, "' has an invalid version ", version.dump());
  if (version.get<int64_t>() > kCheckpointVersion)
    BRAID_THROW(Error, "checkpoint '", path, "' has format version ", version.get<int64_t>(),
                ", written by a newer braid; this build reads version ", kCheckpointVersion);
  return state;
}

// Maps one data file, checks it against its entry in state.json and parses it. A
// mismatch means the file is not the one the commit record describes.
SafetensorsFile read_recorded(const std::string& dir, const json& state, const char* name) {
  const std::string path = join_path(dir, name);
  const json& files = state.value("files", json());
  const json& record = files.is_object() ? files.value(name, json()) : json();
  const json& bytes = record.is_object() ? record.value("bytes", json()) : json();
  const json& hash = record.is_object() ? record.value("xxh64", json()) : json();
  const auto expected_hash = hash.is_string() ? parse_hex64(hash.get<std::string>()) : std::nullopt;
  if (!bytes.is_number_unsigned() || !expected_hash)
    BRAID_THROW(Error, "checkpoint '", join_path(dir, kStateFile), "' lacks a valid record of ",
                name, " (\"files\": {\"", name, "\": {\"bytes\": n, \"xxh64\": hex}})");
  const MappedFile file(path);
  const uint64_t actual_hash = xxh64(file.data(), file.size());
  if (file.size() != bytes.get<uint64_t>() || actual_hash != *expected_hash)
    BRAID_THROW(Error, "checkpoint '", path, "' does not match its record in ", kStateFile,
                " (recorded ", bytes.get<uint64_t>(), " bytes, xxh64 ", hash.get<std::string>(),
                "; found ", file.size(), " bytes, xxh64 ", hex64(actual_hash),
                "): the file was modified or a save was interrupted; use another checkpoint");
  return parse_safetensors(file.data(), file.size(), path);
}

}  // namespace

std::vector<NamedTensor> state_dict(const nn::ParamSet& params) {
  BRAID_CHECK(params.allocated(), "state_dict of a ParamSet that is not allocated yet");
  std::vector<NamedTensor> out;
  out.reserve(params.layout().size() + params.buffers().size());
  for (nn::ParamSet::Id id = 0; id < params.layout().size(); ++id)
    out.push_back({params.info(id).name, params.param(id)});
  for (const nn::NamedBuffer& b : params.buffers()) out.push_back({b.name, b.value});
  return out;
}

void load_state_dict(const SafetensorsFile& file, nn::ParamSet& params, const std::string& source) {
  copy_named_tensors(file.tensors, state_dict(params), source);
}

void copy_named_tensors(const std::vector<NamedTensor>& from,
                        const std::vector<NamedTensor>& targets, const std::string& source) {
  std::unordered_map<std::string_view, const Tensor*> in_file;
  for (const NamedTensor& t : from) in_file.emplace(t.name, &t.tensor);

  std::vector<std::string> missing, mismatched, unexpected;
  std::unordered_set<std::string_view> wanted;
  for (const NamedTensor& dst : targets) {
    wanted.insert(dst.name);
    const auto it = in_file.find(dst.name);
    if (it == in_file.end()) {
      missing.push_back(dst.name);
      continue;
    }
    const Tensor& src = *it->second;
    if (src.dtype() != dst.tensor.dtype())
      mismatched.push_back(detail::concat("tensor '", dst.name, "' is ",
                                          safetensors_dtype(src.dtype()), " but the model expects ",
                                          safetensors_dtype(dst.tensor.dtype())));
    else if (src.shape() != dst.tensor.shape())
      mismatched.push_back(detail::concat("tensor '", dst.name, "' has shape ", src.shape().str(),
                                          " but the model expects ", dst.tensor.shape().str()));
  }
  for (const NamedTensor& t : from)
    if (!wanted.contains(t.name)) unexpected.push_back(t.name);

  if (!missing.empty() || !mismatched.empty() || !unexpected.empty()) {
    std::string message;
    for (size_t i = 0; i < mismatched.size() && i < kMaxNamesListed; ++i)
      message += (message.empty() ? "" : "; ") + mismatched[i];
    if (mismatched.size() > kMaxNamesListed)
      message +=
          "; and " + std::to_string(mismatched.size() - kMaxNamesListed) + " more mismatches";
    if (!missing.empty())
      message += (message.empty() ? "" : "; ") +
                 std::string("missing tensors (the model has them, the file does not): ") +
                 name_list(missing);
    if (!unexpected.empty())
      message += (message.empty() ? "" : "; ") +
                 std::string("unexpected tensors (the file has them, the model does not): ") +
                 name_list(unexpected);
    BRAID_THROW(Error, source, ": ", message);
  }
  // Every check passed: only now is the model changed.
  for (const NamedTensor& dst : targets) {
    Tensor target = dst.tensor;
    target.copy_from(*in_file.at(dst.name));
  }
}

void save_checkpoint(const std::string& dir, const nn::ParamSet& params,
                     const std::vector<NamedTensor>& optimizer_state,
                     const nlohmann::json& train_state,
                     const std::vector<NamedTensor>* averaged_model) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) BRAID_THROW(IoError, "cannot create checkpoint directory '", dir, "': ", ec.message());
  // Withdraw the old commit record first: from here until the new one is written, the
  // directory reads as an unfinished checkpoint rather than as the old one.
  const std::string state_path = join_path(dir, kStateFile);
  if (fs::remove(state_path, ec)) fsync_directory(dir);
  if (ec) BRAID_THROW(IoError, "cannot remove '", state_path, "': ", ec.message());

  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  const FileDigest model =
      write_safetensors(join_path(dir, kModelFile), state_dict(params), metadata);
  const FileDigest optimizer =
      write_safetensors(join_path(dir, kOptimizerFile), optimizer_state, metadata);
  json files = {{kModelFile, {{"bytes", model.bytes}, {"xxh64", hex64(model.xxh64)}}},
                {kOptimizerFile, {{"bytes", optimizer.bytes}, {"xxh64", hex64(optimizer.xxh64)}}}};
  const std::string averaged_path = join_path(dir, kAveragedModelFile);
  if (averaged_model) {
    const FileDigest averaged = write_safetensors(averaged_path, *averaged_model, metadata);
    files[kAveragedModelFile] = {{"bytes", averaged.bytes}, {"xxh64", hex64(averaged.xxh64)}};
  } else if (fs::remove(averaged_path, ec); ec) {
    BRAID_THROW(IoError, "cannot remove '", averaged_path, "': ", ec.message());
  }
  const json state = {{"format", kCheckpointFormat},
                      {"version", kCheckpointVersion},
                      {"files", files},
                      {"train_state", train_state}};
  std::string text;
  try {
    text = state.dump(2) + "\n";
  } catch (const json::exception& e) {
    BRAID_THROW(Error, "cannot write '", state_path,
                "': the training state is not valid JSON text (", e.what(), ")");
  }
  write_file_atomic(state_path, text);
}

LoadedCheckpoint load_checkpoint(const std::string& dir, nn::ParamSet& params) {
  json state = read_state(dir);
  SafetensorsFile model = read_recorded(dir, state, kModelFile);
  SafetensorsFile optimizer = read_recorded(dir, state, kOptimizerFile);
  std::optional<SafetensorsFile> averaged;
  if (state["files"].contains(kAveragedModelFile))
    averaged = read_recorded(dir, state, kAveragedModelFile);
  load_state_dict(model, params, "checkpoint '" + join_path(dir, kModelFile) + "'");
  LoadedCheckpoint out;
  if (averaged) out.averaged_model = std::move(averaged->tensors);
  out.train_state = std::move(state["train_state"]);
  out.optimizer_state = std::move(optimizer.tensors);
  return out;
}

std::string find_checkpoint_dir(const std::string& path) {
  if (fs::exists(join_path(path, kStateFile))) return path;
  const std::string nested = join_path(path, "checkpoint");
  if (fs::exists(join_path(nested, kStateFile))) return nested;
  // What a save leaves when it dies between its renames (Trainer::run's checkpoint swap).
  std::string survivors, meant = path;
  for (const std::string& base : {path, nested})
    for (const char* suffix : {".previous", ".partial"}) {
      const std::string candidate = base + suffix;
      if (!fs::exists(join_path(candidate, kStateFile))) continue;
      std::string step = "step unknown";
      try {
        const json ts = read_state(candidate).value("train_state", json());
        if (ts.is_object() && ts.value("step", json()).is_number_integer())
          step = "step " + std::to_string(ts["step"].get<int64_t>());
      } catch (const Error&) {
        step = "unreadable";
      }
      survivors += (survivors.empty() ? "'" : ", '") + candidate + "' (" + step + ")";
      meant = base;
    }
  if (!survivors.empty())
    BRAID_THROW(Error, "checkpoint '", meant, "' is missing, but ", survivors,
                " survives from a save that was interrupted; pass that directory instead (it is "
                "verified on load)");
  BRAID_THROW(IoError, "checkpoint '", path, "': no state.json there",
              fs::is_directory(path) ? " nor in its checkpoint/" : " (no such directory)",
              "; pass a run directory or the checkpoint directory that braid train wrote "
              "(DIR/checkpoint)");
}

json read_train_state(const std::string& dir) {
  json state = read_state(dir);
  json& ts = state["train_state"];
  if (!ts.is_object())
    BRAID_THROW(Error, "checkpoint '", join_path(dir, kStateFile),
                "' holds no 'train_state' object; it was not written by braid train");
  return std::move(ts);
}

void load_model_weights(const std::string& safetensors_path, nn::ParamSet& params) {
  load_state_dict(read_safetensors(safetensors_path), params,
                  "safetensors file '" + safetensors_path + "'");
}

}  // namespace braid::train
