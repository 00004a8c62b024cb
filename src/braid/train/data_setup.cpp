#include "train/data_setup.h"

#include <algorithm>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "data/csv.h"
#include "data/fashion_mnist.h"
#include "data/image_codec.h"
#include "data/image_folder.h"
#include "data/npy.h"
#include "data/npy_mapped.h"
#include "data/npy_shards.h"
#include "data/sources.h"
#include "data/subset.h"
#include "data/text.h"
#include "nn/graph.h"
#include "nn/sequential.h"
#include "train/loss_setup.h"

namespace braid::train {
namespace {

// `note` says how the data's shape came about where that is not obvious.
void check_fits(const data::Source& source, const BuiltModel& model, const char* what,
                const std::string& note = "") {
  BRAID_CHECK(
      source.input_shape() == model.sample_shape && source.input_dtype() == model.input_dtype, what,
      " data gives samples of shape ", source.input_shape().str(), " (",
      dtype_name(source.input_dtype()), ") but the model takes ", model.sample_shape.str(), " (",
      dtype_name(model.input_dtype), "); set the model's 'input' to match the data", note);
}

// Images from .npy files are read into braid's [H, W, C]: say from which file shape, and
// how the other layout would have read them.
std::string npy_image_note(const data::Source& source, data::ImageLayout layout) {
  const Shape s = source.input_shape();
  if (s.rank() != 3) return "";
  const int64_t h = s[0], w = s[1], c = s[2];
  const bool nchw = layout == data::ImageLayout::nchw;
  const Shape stored = nchw ? Shape{c, h, w} : Shape{h, w, c};
  const Shape other = nchw ? Shape{c, h, w} : Shape{w, c, h};  // what the other layout reads
  return detail::concat(" (images are [H, W, C] in braid: the .npy samples ", stored.str(),
                        " were read as npy_layout '", data::image_layout_name(layout), "'; as '",
                        nchw ? "nhwc" : "nchw", "' they would be ", other.str(), ")");
}

void check_labels(const Tensor& labels, int64_t num_classes, const char* what) {
  const int32_t* l = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    BRAID_CHECK(l[i] >= 0 && l[i] < num_classes, what, " label ", i, " is ", l[i],
                " but the model has ", num_classes, " outputs (classes 0..", num_classes - 1, ")");
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// One sample's (batch of 1) activations held by a step, roughly: every layer's output and
// its gradient for a Sequential; the logits and theirs otherwise. An estimate to refuse a
// batch that cannot fit before anything is allocated, not an account.
double activation_bytes_per_sample(const BuiltModel& model) {
  std::vector<int64_t> dims{1};
  for (int i = 0; i < model.sample_shape.rank(); ++i) dims.push_back(model.sample_shape[i]);
  Shape shape(dims);
  double elements = 0;
  if (const auto* seq = dynamic_cast<const nn::Sequential*>(model.module.get())) {
    for (size_t i = 0; i < seq->size(); ++i) {
      shape = (*seq)[i].output_shape(shape);
      elements += static_cast<double>(shape.numel());
    }
  } else if (const auto* graph = dynamic_cast<const nn::Graph*>(model.module.get())) {
    for (const Shape& node : graph->node_shapes(shape))
      elements += static_cast<double>(node.numel());
  } else {
    elements = static_cast<double>(model.module->output_shape(shape).numel());
  }
  return 2.0 * elements * sizeof(float);
}

double sample_bytes(const data::Source& source) {
  return static_cast<double>(source.input_shape().numel()) *
             static_cast<double>(dtype_size(source.input_dtype())) +
         static_cast<double>(source.target_shape().numel()) *
             static_cast<double>(dtype_size(source.target_dtype()));
}

// Checked before the loaders allocate their batch slots: a batch larger than the data, or
// one whose slots and activations exceed the memory available, is an error naming 'batch'
// instead of an allocation the kernel answers with the OOM killer.
void check_batch_fits(const TrainConfig& config, const BuiltModel& model, const data::Source& train,
                      const data::Source& eval, int64_t eval_batch, const DataPlacement& place) {
  const int64_t batch = train_batch(config, place.rank, place.world);
  if (config.global_batch > 0) {
    BRAID_CHECK(train.size() >= config.global_batch, "the training set has ", train.size(),
                " samples, fewer than one global batch of ", config.global_batch,
                "; lower 'global_batch' (at most ", train.size(), ")");
  } else if (place.world == 1 || (config.dataset == "npy" && !config.npy_shards.empty())) {
    BRAID_CHECK(train.size() >= config.batch, "the training set has ", train.size(),
                " samples, fewer than one batch of ", config.batch, "; lower 'batch' (at most ",
                train.size(), ")");
  } else {
    const int64_t per_rank =
        data::shard_size(train.size(), place.rank, place.world, data::ShardMode::pad);
    BRAID_CHECK(per_rank >= config.batch, "the training set has ", train.size(), " samples, ",
                per_rank, " per rank over ", place.world, " ranks, fewer than one batch of ",
                config.batch, "; lower 'batch' (at most ", per_rank, ") or use fewer ranks");
  }
  const double B = static_cast<double>(batch);
  // Two prefetch slots per loader.
  const double loader =
      2.0 * (B * sample_bytes(train) + static_cast<double>(eval_batch) * sample_bytes(eval));
  const double activations = B * activation_bytes_per_sample(model);
  const double available = static_cast<double>(mem_available_bytes().value_or(0));
  if (available <= 0) return;
  BRAID_CHECK(loader + activations <= available, "batch ", batch, " needs about ",
              (loader + activations) / kGiB, " GiB (", loader / kGiB, " GiB of loader slots, ",
              activations / kGiB, " GiB of activations), more than the ", available / kGiB,
              " GiB this machine has available (MemAvailable in /proc/meminfo); lower '",
              config.global_batch > 0 ? "global_batch" : "batch", "'");
}

// The training data's two sides when the placement asks for a validation split.
void split_training_data(std::shared_ptr<const data::Source>& train,
                         std::shared_ptr<const data::Source>& eval, const data::SplitSpec& spec) {
  data::IndexSplit split = data::make_split(train->size(), spec);
  eval = std::make_shared<data::SubsetSource>(train, std::move(split.validation));
  train = std::make_shared<data::SubsetSource>(train, std::move(split.train));
}

// The class names, for a log line: the first few, then how many more.
std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 8; ++i) {
    if (i > 0) out += ", ";
    out += names[i];
  }
  if (names.size() > 8) out += detail::concat(" and ", names.size() - 8, " more");
  return out;
}

// An image folder's samples at the config's geometry; its size, when not given, is the
// first training image's (a square side: its height).
std::shared_ptr<const data::Source> image_folder_source(const TrainConfig& config,
                                                        const std::string& root,
                                                        const std::vector<std::string>& classes) {
  data::ImageFolderIndex index = data::scan_image_folder(root, classes);
  data::ImageFolderOptions o;
  o.channels = static_cast<int>(config.image_channels);
  o.height = o.width = config.image_size > 0
                           ? config.image_size
                           : data::decode_image(index.files.front(), o.channels).h;
  o.mean = {static_cast<float>(config.image_mean)};
  o.std = {static_cast<float>(config.image_std)};
  return std::make_shared<data::ImageFolderSource>(std::move(index), std::move(o));
}

char csv_delimiter_char(const std::string& text) {
  if (text.empty()) return 0;
  return text == "tab" ? '\t' : text[0];
}

// dataset csv: the train and test tables (the test one of csv_test_folds folds of the
// train table when csv_test is not set), and the record of how they were read.
void load_csv_sources(const TrainConfig& config, const BuiltModel& model,
                      std::shared_ptr<const data::Source>& train,
                      std::shared_ptr<const data::Source>& eval, nlohmann::json& record) {
  data::CsvOptions opts;
  opts.delimiter = csv_delimiter_char(config.csv_delimiter);
  opts.header = config.csv_header;
  opts.skip_rows = config.csv_skip_rows;
  opts.label = config.csv_label;
  // A regression or multi-label loss reads numbers: csv_targets' columns, else the label's.
  if (loss_task(config) != LossTask::classification)
    opts.targets = config.csv_targets.empty() ? std::vector<std::string>{config.csv_label}
                                              : config.csv_targets;
  auto tr = std::make_shared<data::CsvTable>(data::load_csv(config.csv_train, opts));
  std::shared_ptr<data::CsvTable> te;
  if (!config.csv_test.empty()) {
    if (!tr->classes.empty()) opts.classes = &tr->classes;
    te = std::make_shared<data::CsvTable>(data::load_csv(config.csv_test, opts));
    BRAID_CHECK(te->data.features.dim(1) == tr->data.features.dim(1), config.csv_test, " has ",
                te->data.features.dim(1), " feature columns but ", config.csv_train, " has ",
                tr->data.features.dim(1));
    BRAID_CHECK(te->classes.empty() || !tr->classes.empty(), config.csv_test,
                ": its labels are text but ", config.csv_train,
                "'s are integers; label both files the same way");
  }
  record = nlohmann::json{{"dataset", "csv"},
                          {"features", tr->feature_names},
                          {"label", tr->label_name},
                          {"num_classes", tr->data.num_classes}};
  if (!tr->target_names.empty()) record["targets"] = tr->target_names;
  if (!tr->classes.empty()) {
    record["classes"] = tr->classes;
    std::string mapping;
    for (size_t i = 0; i < tr->classes.size() && i < 20; ++i)
      mapping += detail::concat(i ? ", " : "", i, " = '", tr->classes[i], "'");
    log_info("csv: ", config.csv_train, ": ", tr->classes.size(),
             " classes from text labels: ", mapping, tr->classes.size() > 20 ? ", ..." : "");
  }
  if (config.csv_standardize) {
    const data::FeatureScale scale = data::feature_scale(tr->data.features);
    data::standardize(tr->data.features, scale);
    if (te) data::standardize(te->data.features, scale);
    record["standardize"] = {{"mean", scale.mean}, {"std", scale.std}};
  }
  if (!tr->data.numeric_targets()) check_labels(tr->data.labels, model.num_classes, "training");
  if (te && !te->data.numeric_targets()) check_labels(te->data.labels, model.num_classes, "test");
  train =
      std::make_shared<data::ArraySource>(std::shared_ptr<const data::ArrayDataset>(tr, &tr->data));
  if (te) {
    eval = std::make_shared<data::ArraySource>(
        std::shared_ptr<const data::ArrayDataset>(te, &te->data));
  } else {
    data::IndexSplit split = data::k_fold_split(
        train->size(), static_cast<int>(config.csv_test_folds), 0, true, config.seed);
    eval = std::make_shared<data::SubsetSource>(train, std::move(split.validation));
    train = std::make_shared<data::SubsetSource>(train, std::move(split.train));
    record["test"] = {{"folds", config.csv_test_folds}, {"fold", 0}, {"seed", config.seed}};
  }
}

// dataset npy: the training and test sources, mapped (data/npy_mapped.h) or read whole,
// and with npy_shards only this rank's training files (data/npy_shards.h). Returns
// whether training is file-sharded (each rank's source its own: ShardMode::local).
bool load_npy_sources(const TrainConfig& config, const BuiltModel& model,
                      const DataPlacement& place, std::shared_ptr<const data::Source>& train,
                      std::shared_ptr<const data::Source>& eval) {
  const data::ImageLayout layout = data::parse_image_layout(config.npy_layout);
  const bool sharded = !config.npy_shards.empty();
  const std::string& test_x = config.npy[sharded ? 0 : 2];
  const std::string& test_y = config.npy[sharded ? 1 : 3];
  // auto: map what would take half of memory read whole; smaller data is read whole, as
  // before (no page fault per row, every value checked finite at load). Mapping costs
  // nothing up front, so sharded data (made for data larger than memory) is always mapped.
  bool map = config.npy_mmap == "on" || (config.npy_mmap == "auto" && sharded);
  if (config.npy_mmap == "auto" && !sharded) {
    // Read whole, the features become f32: 4 bytes an element whatever the file's dtype.
    const auto f32_bytes = [](const std::string& path) {
      return static_cast<uint64_t>(data::read_npy_layout(path).header.numel()) * 4;
    };
    const uint64_t bytes = f32_bytes(config.npy[0]) + f32_bytes(test_x);
    // Mapped sources read class labels only: numeric targets are read whole.
    map = bytes > mem_available_bytes().value_or(UINT64_MAX) / 2 &&
          loss_task(config) == LossTask::classification;
  }
  data::MappedNpyOptions opts;
  opts.layout = layout;
  opts.map = map;
  auto check = [&](const std::vector<int32_t>& labels, const char* what) {
    const Tensor t = Tensor::view(const_cast<int32_t*>(labels.data()),
                                  Shape{static_cast<int64_t>(labels.size())}, DType::i32);
    check_labels(t, model.num_classes, what);
  };
  if (sharded) {
    data::ShardPlan plan;
    auto tr = data::open_npy_shards(config.npy_shards, config.npy_shard_labels, place.rank,
                                    place.world, opts, &plan);
    check(tr->labels(), "training");
    if (place.rank == 0) {
      size_t files = 0;
      for (const auto& f : plan.files) files += f.size();
      log_info("npy shards: ", files, " files over ", place.world, " ranks; each rank takes ",
               plan.epoch_samples, " samples an epoch", map ? " (mapped)" : "");
      const int64_t total = plan.epoch_samples * place.world;
      if (plan.repeats() * 10 > total)
        log_warn("npy shards: the ranks' files hold uneven samples (", plan.samples.front(),
                 " on rank 0, ", *std::min_element(plan.samples.begin(), plan.samples.end()),
                 " the fewest), so ", plan.repeats(), " of each epoch's ", total,
                 " samples are repeats; write a multiple of ", place.world,
                 " files of equal size to balance them");
    }
    train = tr;
  } else if (map) {
    auto tr = std::make_shared<const data::MappedNpySource>(
        std::vector<data::NpyFilePair>{{config.npy[0], config.npy[1]}}, opts);
    check(tr->labels(), "training");
    train = tr;
  }
  if (map) {
    auto te = std::make_shared<const data::MappedNpySource>(
        std::vector<data::NpyFilePair>{{test_x, test_y}}, opts);
    check(te->labels(), "test");
    eval = te;
  } else {
    auto te = std::make_shared<data::ArrayDataset>(data::load_npy_dataset(test_x, test_y, layout));
    // Numeric targets' fit to the loss and the model is check_loss_fits'.
    if (!te->numeric_targets()) check_labels(te->labels, model.num_classes, "test");
    eval = std::make_shared<data::ArraySource>(te);
  }
  if (!train) {
    auto tr = std::make_shared<data::ArrayDataset>(
        data::load_npy_dataset(config.npy[0], config.npy[1], layout));
    if (!tr->numeric_targets()) check_labels(tr->labels, model.num_classes, "training");
    train = std::make_shared<data::ArraySource>(tr);
  }
  return sharded;
}

}  // namespace

int64_t train_batch(const TrainConfig& config, int rank, int world) {
  if (config.global_batch <= 0) return config.batch;
  BRAID_CHECK(config.global_batch >= world, "global_batch ", config.global_batch,
              " cannot give each of ", world,
              " data-parallel ranks a sample of every step; set "
              "it to at least ",
              world);
  return data::batch_share(config.global_batch, rank, world);
}

DataLoaders make_loaders(const TrainConfig& config, const BuiltModel& model,
                         const DataPlacement& placement) {
  BRAID_CHECK(placement.world >= 1 && placement.rank >= 0 && placement.rank < placement.world,
              "rank ", placement.rank, " is not in a world of ", placement.world);
  const bool split = placement.validation.kind != data::SplitKind::none;
  std::shared_ptr<const data::Source> train, eval;
  nlohmann::json record;
  bool file_sharded = config.dataset == "npy" && !config.npy_shards.empty();
  // A rank's file shards depend on its rank and world: never reuse another placement's.
  if (placement.cache && placement.cache->train && !file_sharded) {
    train = placement.cache->train;
    eval = placement.cache->eval;
    record = placement.cache->record;
  } else if (config.dataset == "image_folder") {
    BRAID_CHECK(model.task == Task::classification,
                "dataset 'image_folder' is for classification but the model's output is per "
                "position (a language model)");
    train = image_folder_source(config, config.image_train, {});
    const auto* folder = static_cast<const data::ImageFolderSource*>(train.get());
    const std::vector<std::string>& classes = folder->index().classes;
    BRAID_CHECK(static_cast<int64_t>(classes.size()) <= model.num_classes, "image folder '",
                config.image_train, "' has ", classes.size(), " classes but the model has ",
                model.num_classes, " outputs");
    eval = image_folder_source(config, config.image_test, classes);
    if (placement.rank == 0)
      log_info("image folder ", config.image_train, ": ", train->size(), " images of ",
               classes.size(), " classes (", join_names(classes), "); ", eval->size(),
               " test images in ", config.image_test);
    if (split) split_training_data(train, eval, placement.validation);
  } else if (config.dataset == "csv") {
    BRAID_CHECK(model.task == Task::classification,
                "dataset 'csv' is for classification but the model's output is per position (",
                "a language model)");
    load_csv_sources(config, model, train, eval, record);
    if (split) split_training_data(train, eval, placement.validation);
  } else if (config.dataset == "fashion-mnist" || config.dataset == "npy") {
    BRAID_CHECK(model.task == Task::classification, "dataset '", config.dataset,
                "' is for classification but the model's output is per position (",
                "a language model); use dataset 'text'");
    if (config.dataset == "fashion-mnist") {
      auto tr = std::make_shared<data::ImageDataset>(
          data::load_fashion_mnist(config.data_dir, data::Split::train));
      auto te = std::make_shared<data::ImageDataset>(
          data::load_fashion_mnist(config.data_dir, data::Split::test));
      check_labels(tr->labels, model.num_classes, "training");
      train = std::make_shared<data::ImageSource>(tr);
      eval = std::make_shared<data::ImageSource>(te);
    } else {
      file_sharded = load_npy_sources(config, model, placement, train, eval);
      BRAID_CHECK(!(file_sharded && split), "'npy_shards' gives each rank its own files, so ",
                  "a validation split of the training data would differ by rank; validate on ",
                  "the test pair in 'npy' (split.kind 'none')");
    }
    if (split) split_training_data(train, eval, placement.validation);
  } else {
    BRAID_CHECK(!split, "split.kind '", data::split_kind_name(placement.validation.kind),
                "' needs an indexed dataset (fashion-mnist, npy, csv); dataset 'text' draws random "
                "windows and validates on the corpus's held-out tail: set split.kind to 'none'");
    BRAID_CHECK(model.task == Task::language_model && model.input_dtype == DType::i32,
                "dataset 'text' needs a language model (token ids in, logits per position out), "
                "e.g. --model gpt-tiny");
    BRAID_CHECK(model.num_classes >= data::kVocabBytes, "dataset 'text' is byte-level (",
                data::kVocabBytes, " symbols) but the model has ", model.num_classes, " outputs");
    auto corpus = std::make_shared<data::TextCorpus>(
        config.text_files.empty() ? data::TextCorpus::fortunes()
                                  : data::TextCorpus::from_files(config.text_files));
    // An epoch draws as many windows as the training split holds non-overlapping ones.
    train = std::make_shared<data::TextTrainSource>(corpus, config.seq_len,
                                                    corpus->train_size() / config.seq_len);
    eval = std::make_shared<data::TextValidationSource>(corpus, config.seq_len);
  }
  if (placement.cache) *placement.cache = DataCache{train, eval, record};
  const std::string note = config.dataset == "npy"
                               ? npy_image_note(*train, data::parse_image_layout(config.npy_layout))
                               : std::string();
  check_fits(*train, model, "training", note);
  check_fits(*eval, model, "evaluation", note);
  check_loss_fits(config, model, *train, "training");
  check_loss_fits(config, model, *eval, "evaluation");

  data::LoaderOptions train_opts;
  train_opts.batch = config.batch;
  train_opts.shuffle = true;
  train_opts.drop_last = true;
  train_opts.seed = config.seed;
  train_opts.rank = placement.rank;
  train_opts.world = placement.world;
  // File shards: each rank's source is its own, already as long as every other's.
  train_opts.sharding = file_sharded ? data::ShardMode::local : data::ShardMode::pad;
  // Step blocks: batch, drop_last and sharding give way to the rank's share of each step.
  train_opts.global_batch = config.global_batch;
  train_opts.augment.flip = config.augment_flip;
  train_opts.augment.crop_pad = config.augment_crop_pad;
  train_opts.augment.erase = static_cast<float>(config.augment_erase);
  // Evaluation batches never exceed the split: one batch of all of it is the same batch.
  // Each rank reads only its shard, so summed tallies count every sample once; with one
  // rank the shard is the whole split in order, as before.
  const data::LoaderOptions eval_opts =
      data::sharded_eval_options(std::min(config.batch, std::max<int64_t>(1, eval->size())),
                                 placement.evaluate_whole_split ? 0
                                 : placement.eval_world > 0     ? placement.eval_rank
                                                                : placement.rank,
                                 placement.evaluate_whole_split ? 1
                                 : placement.eval_world > 0     ? placement.eval_world
                                                                : placement.world,
                                 config.seed);
  check_batch_fits(config, model, *train, *eval, eval_opts.batch, placement);
  DataLoaders out;
  out.train = std::make_unique<data::Loader>(train, train_opts);
  out.eval = std::make_unique<data::Loader>(eval, eval_opts);
  out.record = std::move(record);
  return out;
}

}  // namespace braid::train
