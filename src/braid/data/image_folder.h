// A folder of images with one subfolder per class, as torchvision's ImageFolder reads it:
// root/<class>/<any name>.png|.jpg|.jpeg. Classes are the subfolders in sorted order, and
// their names are kept so a prediction maps back to one. The files stay on disk: a sample is
// decoded (data/image_codec.h), resized and normalised when the loader's worker fills a
// batch, so the dataset costs no memory beyond its file list and the training thread never
// decodes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace braid::data {

struct ImageFolderIndex {
  std::string root;
  std::vector<std::string> classes;  // class i's name: its subfolder
  std::vector<std::string> files;    // every image, class by class, names sorted within
  std::vector<int32_t> labels;       // files[i]'s class
};

// The images under `root`. With `classes` given (the train folder's), a test folder is read
// with the same class numbers: a subfolder not among them is an Error naming it. A root
// that is not a folder, a class folder without images, and no class at all are Errors
// naming the path. Files of other kinds are skipped (a README beside the images).
ImageFolderIndex scan_image_folder(const std::string& root,
                                   const std::vector<std::string>& classes = {});

struct ImageFolderOptions {
  int64_t height = 0, width = 0;  // every image is resized (bilinear) to this
  int channels = 3;               // 1: gray, 3: RGB
  // Per channel, on pixels scaled to [0, 1]: (x - mean) / std. One value serves every
  // channel. Default: 0.5 and 0.5, so inputs lie in [-1, 1].
  std::vector<float> mean = {0.5f}, std = {0.5f};
};

// Samples of an ImageFolderIndex as f32 NHWC [height, width, channels] and i32 labels. With
// augmentation (crop_pad, flip, erase), the crop and flip act on the resized image, the
// padding being the normalised value 0 (the mean), then erasing.
class ImageFolderSource : public Source {
 public:
  ImageFolderSource(ImageFolderIndex index, ImageFolderOptions options);
  std::string_view kind() const override { return "image_folder"; }
  int64_t size() const override { return static_cast<int64_t>(index_.files.size()); }
  Shape input_shape() const override {
    return Shape{options_.height, options_.width, options_.channels};
  }
  DType input_dtype() const override { return DType::f32; }
  Shape target_shape() const override { return Shape{}; }
  void fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
            Tensor& targets) const override;
  const ImageFolderIndex& index() const { return index_; }

 private:
  ImageFolderIndex index_;
  ImageFolderOptions options_;
  std::vector<float> scale_, shift_;  // per channel: x * scale + shift normalises x in [0, 255]
};

}  // namespace braid::data
