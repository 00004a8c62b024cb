#include "train/data_setup.h"

#include "core/error.h"
#include "data/fashion_mnist.h"
#include "data/npy.h"
#include "data/sources.h"
#include "data/text.h"

namespace braid::train {
namespace {

void check_fits(const data::Source& source, const BuiltModel& model, const char* what) {
  BRAID_CHECK(
      source.input_shape() == model.sample_shape && source.input_dtype() == model.input_dtype, what,
      " data gives samples of shape ", source.input_shape().str(), " (",
      dtype_name(source.input_dtype()), ") but the model takes ", model.sample_shape.str(), " (",
      dtype_name(model.input_dtype), "); set the model's 'input' to match the data");
}

void check_labels(const Tensor& labels, int64_t num_classes, const char* what) {
  const int32_t* l = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    BRAID_CHECK(l[i] >= 0 && l[i] < num_classes, what, " label ", i, " is ", l[i],
                " but the model has ", num_classes, " outputs (classes 0..", num_classes - 1, ")");
}

}  // namespace

DataLoaders make_loaders(const TrainConfig& config, const BuiltModel& model) {
  std::shared_ptr<const data::Source> train, eval;
  if (config.dataset == "fashion-mnist" || config.dataset == "npy") {
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
      auto tr = std::make_shared<data::ArrayDataset>(
          data::load_npy_dataset(config.npy[0], config.npy[1]));
      auto te = std::make_shared<data::ArrayDataset>(
          data::load_npy_dataset(config.npy[2], config.npy[3]));
      check_labels(tr->labels, model.num_classes, "training");
      check_labels(te->labels, model.num_classes, "test");
      train = std::make_shared<data::ArraySource>(tr);
      eval = std::make_shared<data::ArraySource>(te);
    }
  } else {
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
  check_fits(*train, model, "training");
  check_fits(*eval, model, "evaluation");

  data::LoaderOptions train_opts;
  train_opts.batch = config.batch;
  train_opts.shuffle = true;
  train_opts.drop_last = true;
  train_opts.seed = config.seed;
  train_opts.augment.flip = config.augment_flip;
  train_opts.augment.crop_pad = config.augment_crop_pad;
  train_opts.augment.erase = static_cast<float>(config.augment_erase);
  data::LoaderOptions eval_opts = train_opts;
  eval_opts.shuffle = false;
  eval_opts.drop_last = false;
  eval_opts.augment = {};
  DataLoaders out;
  out.train = std::make_unique<data::Loader>(train, train_opts);
  out.eval = std::make_unique<data::Loader>(eval, eval_opts);
  BRAID_CHECK(out.train->batches_per_epoch() > 0, "the training set has ", train->size(),
              " samples, fewer than one batch of ", config.batch, "; lower 'batch'");
  return out;
}

}  // namespace braid::train
