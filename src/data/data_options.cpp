#include "data/data_options.h"

#include <vector>

#include "util/error.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

constexpr const char* kDataOwner = "DataOptions";

bool has_augment_recipe(DatasetKind d) {
  return d == DatasetKind::kCifar10 || d == DatasetKind::kFashionMnist || d == DatasetKind::kMnist ||
         decodes_images(d);
}

// "{0}", "{0} and {1}", "{0}, {1} and {2}": the first n fields of an OptionError, listed.
std::string listed_fields(size_t n) {
  std::string names;
  for (size_t i = 0; i < n; ++i) names += str(i == 0 ? "" : i + 1 == n ? " and " : ", ", "{", i, "}");
  return names;
}

// The image datasets' fields, set for another dataset (they would be silently ignored).
void reject_image_folder_fields(const DataOptions& d) {
  if (decodes_images(d.dataset)) return;
  const DataOptions defaults;
  std::vector<OptionField> set;
  if (d.resize_size != defaults.resize_size) set.push_back({&d.resize_size, "resize_size"});
  if (d.jpeg_dct_scaling != defaults.jpeg_dct_scaling)
    set.push_back({&d.jpeg_dct_scaling, "jpeg_dct_scaling"});
  if (d.bad_images != defaults.bad_images) set.push_back({&d.bad_images, "bad_images"});
  if (set.empty()) return;
  const size_t at = set.size();
  set.push_back({&d.dataset, "dataset"});
  throw OptionError(set,
                    str(listed_fields(at), at == 1 ? " is" : " are", " for {", at, ":image_folder} and {", at,
                        ":webdataset}; {", at, ":", word(d.dataset), "} decodes no image files: drop ",
                        at == 1 ? "it" : "them"),
                    kDataOwner);
}

// The fields this dataset has no use for (where they differ from their defaults): dataset
// tokens with a data_path would otherwise train on synthetic tokens.
void reject_unused(const DataOptions& d) {
  const DataOptions defaults;
  const std::string kind = word(d.dataset);
  const bool synthetic = d.dataset == DatasetKind::kSynthetic;
  if (!d.data_path.empty() && !reads_path(d.dataset))
    throw OptionError(
        {{&d.data_path, "data_path"}, {&d.dataset, "dataset"}, {&d.data_dir, "data_dir"}},
        str("{0}='", OptionError::literal(d.data_path),
            "' is the file of {1:text}, {1:token_shards} or {1:webdataset}; {1:", kind, "}",
            d.dataset == DatasetKind::kTokens ? " is synthetic tokens (no file): use {1:text} to train on "
                                                "the file's bytes, {1:token_shards} on "
                                                "its tokens"
                                              : " does not read it: drop {0} (its files are in {2})"),
        kDataOwner);
  if (!d.val_path.empty() && !reads_shards(d.dataset))
    throw OptionError({{&d.val_path, "val_path"}, {&d.dataset, "dataset"}},
                      str("{0}='", OptionError::literal(d.val_path),
                          "' is the validation shards of {1:token_shards} or {1:webdataset}; {1:", kind,
                          "} does not read it: drop {0}"),
                      kDataOwner);
  if (!d.data_dir.empty() && !reads_folder(d.dataset))
    throw OptionError({{&d.data_dir, "data_dir"}, {&d.dataset, "dataset"}, {&d.data_path, "data_path"}},
                      str("{0}='", OptionError::literal(d.data_dir), "': {1:", kind, "} reads no folder (",
                          reads_path(d.dataset) ? "its files are {2}" : "it is generated", "): drop {0}"),
                      kDataOwner);
  if (!synthetic) {  // the shape fields set: synthetic's alone
    std::vector<OptionField> set;
    if (d.num_classes != defaults.num_classes) set.push_back({&d.num_classes, "num_classes"});
    if (d.in_channels != defaults.in_channels) set.push_back({&d.in_channels, "in_channels"});
    if (d.image_size != defaults.image_size && !decodes_images(d.dataset))
      set.push_back({&d.image_size, "image_size"});
    if (!set.empty()) {
      const std::string names = listed_fields(set.size());
      const size_t at = set.size();
      set.push_back({&d.dataset, "dataset"});
      throw OptionError(
          set,
          str(names, set.size() == 2 ? " shapes {" : " shape {", at, ":synthetic}; {", at, ":", kind,
              "} takes its shape and classes from its data: drop ", set.size() == 2 ? "it" : "them"),
          kDataOwner);
    }
  }
  if (!synthetic && d.dataset != DatasetKind::kTokens && d.dataset_size != defaults.dataset_size)
    throw OptionError(
        {{&d.dataset_size, "dataset_size"}, {&d.dataset, "dataset"}},
        str("{0}=", d.dataset_size, " sizes the generated datasets (synthetic, tokens); {1:", kind,
            "} has as many samples as its data: drop it (to train on fewer, stop early with max_steps: "
            "--max_steps)"),
        kDataOwner);
}

}  // namespace

void DataOptions::validate() const {
  check_option_positive(num_classes, "num_classes", "pass the number of classes, e.g. {0:10}", kDataOwner);
  check_option_positive(in_channels, "in_channels", "pass e.g. {0:3}", kDataOwner);
  check_option_non_negative(image_size, "image_size", "pass e.g. {0:224}, or {0:0} for the dataset's",
                            kDataOwner);
  check_option_non_negative(resize_size, "resize_size",
                            "pass e.g. {0:256}, or {0:0} for floor(image_size·8/7)", kDataOwner);
  if (resize_size > 0 && resize_size < image_size_or_default())
    throw OptionError({{&resize_size, "resize_size"}, {&image_size, "image_size"}},
                      str("{0}=", resize_size, " is below {1}=", image_size_or_default(),
                          ": the evaluation's center crop must fit in the resized image; pass {0:",
                          image_size_or_default() * 8 / 7, "} or more (or {0:0})"),
                      kDataOwner);
  check_option_positive(dataset_size, "dataset_size", "pass e.g. {0:50000}", kDataOwner);
  const std::string kind = word(dataset);
  if (augment && !has_augment_recipe(dataset))
    throw OptionError({{&augment, "augment"}, {&dataset, "dataset"}},
                      str("{0} has no recipe for {1:", kind,
                          "}; use it with cifar10, fashion-mnist, mnist, image_folder or webdataset"),
                      kDataOwner);
  if (dataset == DatasetKind::kText && data_path.empty())
    throw OptionError({{&dataset, "dataset"}, {&data_path, "data_path"}},
                      "{0:text} needs {1:FILE} (any text file; its bytes are the tokens)", kDataOwner);
  if (dataset == DatasetKind::kTokenShards && data_path.empty())
    throw OptionError({{&dataset, "dataset"}, {&data_path, "data_path"}},
                      "{0:token_shards} needs {1:GLOB}: the training shards (nanoGPT's train.bin, or llm.c's "
                      "files, e.g. 'fineweb10B/fineweb_train_*.bin')",
                      kDataOwner);
  if (dataset == DatasetKind::kWebDataset && data_path.empty())
    throw OptionError({{&dataset, "dataset"}, {&data_path, "data_path"}},
                      "{0:webdataset} needs {1:GLOB}: the training shards (tar files of KEY.jpg|png and "
                      "KEY.cls members, e.g. 'shards/train-*.tar')",
                      kDataOwner);
  reject_unused(*this);
  reject_image_folder_fields(*this);
}

}  // namespace ddptrain
