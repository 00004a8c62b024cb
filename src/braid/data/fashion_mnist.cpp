// Fashion-MNIST loading: IDX images and labels checked against each other.
#include "data/fashion_mnist.h"

#include <filesystem>

#include "core/error.h"
#include "data/idx.h"

namespace braid::data {
namespace {

constexpr const char* kHint =
    "install the dataset-fashion-mnist package (apt-get install dataset-fashion-mnist) or "
    "point the data directory at a copy of the Fashion-MNIST files";

std::string find_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path gz = fs::path(dir) / (name + ".gz");
  const fs::path plain = fs::path(dir) / name;
  std::error_code ec;
  if (fs::exists(gz, ec)) return gz.string();
  if (fs::exists(plain, ec)) return plain.string();
  BRAID_THROW(IoError, "Fashion-MNIST: ", gz.string(), " not found; ", kHint);
}

}  // namespace

ImageDataset load_idx_images(const std::string& images_path, const std::string& labels_path,
                             int32_t num_classes, const std::string& hint) {
  IdxArray images = read_idx(images_path, hint);
  const IdxArray labels = read_idx(labels_path, hint);
  const std::string fix = hint.empty() ? "" : "; " + hint;
  if (images.dims.size() != 3 && images.dims.size() != 4)
    BRAID_THROW(IoError, images_path, ": expected images [N, H, W] or [N, H, W, C], got ",
                images.dims.size(), " dimensions", fix);
  if (labels.dims.size() != 1)
    BRAID_THROW(IoError, labels_path, ": expected labels [N], got ", labels.dims.size(),
                " dimensions", fix);
  const int64_t n = images.dims[0];
  if (labels.dims[0] != n)
    BRAID_THROW(IoError, images_path, " holds ", n, " images but ", labels_path, " holds ",
                labels.dims[0], " labels; the files do not belong together", fix);
  const int64_t h = images.dims[1], w = images.dims[2];
  const int64_t c = images.dims.size() == 4 ? images.dims[3] : 1;
  if (h <= 0 || w <= 0 || c <= 0)
    BRAID_THROW(IoError, images_path, ": empty image size ", h, "x", w, "x", c, fix);

  ImageDataset d;
  d.pixels = std::move(images.data);
  d.labels = Tensor::empty({n}, DType::i32, MemCategory::data);
  d.n = n;
  d.h = h;
  d.w = w;
  d.c = c;
  d.num_classes = num_classes;
  int32_t* out = d.labels.data<int32_t>();
  const uint8_t* in = labels.bytes();
  for (int64_t i = 0; i < n; ++i) {
    if (in[i] >= num_classes)
      BRAID_THROW(IoError, labels_path, ": label ", int{in[i]}, " at index ", i,
                  " is out of range [0, ", num_classes, ")", fix);
    out[i] = in[i];
  }
  return d;
}

ImageDataset load_fashion_mnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string images = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels = find_file(dir, prefix + "-labels-idx1-ubyte");
  ImageDataset d = load_idx_images(images, labels, 10, kHint);
  if (d.h != 28 || d.w != 28 || d.c != 1)
    BRAID_THROW(IoError, images, ": Fashion-MNIST images are 28x28x1, this file holds ", d.h, "x",
                d.w, "x", d.c, "; ", kHint);
  return d;
}

}  // namespace braid::data
