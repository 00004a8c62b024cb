#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"
#include "data/image_codec.h"
#include "data/transforms.h"

namespace braid::data {
namespace {

namespace fs = std::filesystem;

bool is_image_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

std::vector<std::string> sorted_entries(const fs::path& dir, bool folders) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (folders ? e.is_directory() : (e.is_regular_file() && is_image_name(e.path())))
      out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

ImageFolderIndex scan_image_folder(const std::string& root,
                                   const std::vector<std::string>& classes) {
  BRAID_CHECK(fs::is_directory(root), "image folder '", root,
              "' is not a folder; it should hold one subfolder of images per class");
  ImageFolderIndex index;
  index.root = root;
  const std::vector<std::string> found = sorted_entries(root, true);
  BRAID_CHECK(!found.empty(), "image folder '", root,
              "' has no subfolders; put each class's images in a subfolder named after it");
  index.classes = classes.empty() ? found : classes;
  for (const std::string& name : found) {
    const auto at = std::find(index.classes.begin(), index.classes.end(), name);
    BRAID_CHECK(at != index.classes.end(), "image folder '", root, "' has a class '", name,
                "' the training folder does not; its classes are the training folder's");
    const auto label = static_cast<int32_t>(at - index.classes.begin());
    const std::vector<std::string> files = sorted_entries(fs::path(root) / name, false);
    BRAID_CHECK(!files.empty(), "image folder '", root, "': class '", name,
                "' holds no .png, .jpg or .jpeg file");
    for (const std::string& f : files) {
      index.files.push_back((fs::path(root) / name / f).string());
      index.labels.push_back(label);
    }
  }
  return index;
}

ImageFolderSource::ImageFolderSource(ImageFolderIndex index, ImageFolderOptions options)
    : index_(std::move(index)), options_(std::move(options)) {
  const int c = options_.channels;
  BRAID_CHECK(c == 1 || c == 3, "image folder: channels must be 1 or 3, got ", c);
  BRAID_CHECK(options_.height >= 1 && options_.width >= 1 && options_.height <= 8192 &&
                  options_.width <= 8192,
              "image folder: the image size must be 1 to 8192 pixels a side, got ", options_.height,
              " x ", options_.width);
  for (const auto* v : {&options_.mean, &options_.std})
    BRAID_CHECK(v->size() == 1 || static_cast<int>(v->size()) == c, "image folder: ", v->size(),
                " normalisation values for ", c, " channels (give 1 or ", c, ")");
  for (int k = 0; k < c; ++k) {
    const float mean = options_.mean[options_.mean.size() == 1 ? 0 : k];
    const float std = options_.std[options_.std.size() == 1 ? 0 : k];
    BRAID_CHECK(std > 0, "image folder: std must be > 0, got ", std);
    scale_.push_back(1.0f / (255.0f * std));
    shift_.push_back(-mean / std);
  }
}

void ImageFolderSource::fill(std::span<const SampleRef> samples, const FillContext& ctx,
                             Tensor& inputs, Tensor& targets) const {
  const ImageGeometry g{options_.height, options_.width, options_.channels};
  const int64_t numel = g.h * g.w * g.c;
  const bool augment = ctx.augment.flip || ctx.augment.crop_pad > 0 || ctx.augment.erase > 0;
  std::vector<float> resized(static_cast<size_t>(numel));  // one batch's scratch
  float* in = inputs.f32();
  int32_t* tg = targets.data<int32_t>();
  for (size_t r = 0; r < samples.size(); ++r) {
    const int64_t i = samples[r].index;
    const DecodedImage image = decode_image(index_.files[static_cast<size_t>(i)], g.c);
    float* dst = in + static_cast<int64_t>(r) * numel;
    float* target = augment ? resized.data() : dst;
    resize_bilinear(image, g.h, g.w, target);
    // Per pixel, its channels: no division per value on this per-sample path.
    for (int64_t p = 0; p < numel; p += g.c)
      for (int64_t k = 0; k < g.c; ++k)
        target[p + k] =
            target[p + k] * scale_[static_cast<size_t>(k)] + shift_[static_cast<size_t>(k)];
    if (augment) {
      Rng rng = sample_rng(ctx, samples[r].position);
      transform_f32(resized.data(), g, draw_crop_flip(ctx.augment, rng), dst);
      erase(draw_erase(ctx.augment, g, rng), g, dst);
    }
    tg[r] = index_.labels[static_cast<size_t>(i)];
  }
}

}  // namespace braid::data
