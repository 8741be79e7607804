#include "data/image_folder_splits.h"

#include <algorithm>
#include <filesystem>

#include "util/error.h"

namespace ddptrain {

ImageFolderSplits image_folder_splits(const std::string& dir, ImageOptions io,
                                      const std::vector<std::string>* trained_names) {
  namespace fs = std::filesystem;
  DDP_USAGE_CHECK(
      trained_names || fs::is_directory(dir + "/train"), "folder '", dir,
      "' has no train/ folder: image_folder reads DIR/train/<class>/<image> (and DIR/val/<class>/<image> "
      "for evaluation), ImageNet's layout");
  ImageFolderSplits s;
  if (!trained_names) s.train = std::make_unique<ImageFolderDataset>(dir + "/train", io);
  if (fs::is_directory(dir + "/val") && fs::is_directory(dir + "/train")) {
    // A val/ that is train/ (or holds it, or lies in it) under another name, through a link,
    // would score the model on the images it trains on.
    const fs::path t = fs::canonical(dir + "/train"), v = fs::canonical(dir + "/val");
    const auto within = [](const fs::path& inner, const fs::path& outer) {
      const auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
      return o == outer.end();
    };
    DDP_USAGE_CHECK(
        !within(v, t) && !within(t, v), "folder '", dir, "': val/ (", v.string(), ") and train/ (",
        t.string(),
        ") are the same images or one holds the other, through a link: the validation split would "
        "score the model on images it trains on; give val/ images of its own");
  }
  if (fs::is_directory(dir + "/val")) {
    io.random_crop = false;
    s.val = std::make_unique<ImageFolderDataset>(dir + "/val", io,
                                                 trained_names ? *trained_names : s.train->classes());
  }
  return s;
}

}  // namespace ddptrain
