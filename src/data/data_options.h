// DataOptions: what a run's data is (dataset, files, batch, loader threads), the data layer's
// own options; TrainConfig holds one (config/train_config.h), library users fill their own.
#pragma once

#include <string>

#include "config/choices.h"

namespace ddptrain {

struct DataOptions {
  DatasetKind dataset = DatasetKind::kSynthetic;
  std::string data_dir;   // empty: the dataset's default (fashion-mnist only; see datasets.h)
  std::string data_path;  // the text file of --dataset text
  int num_classes = 10;
  int in_channels = 3;
  int image_size = 32;
  long long dataset_size = 50000;  // synthetic and tokens only
  int batch_size = 64;             // per rank
  int num_workers = 4;             // loader threads; 0 = in the training thread
  int prefetch_factor = 2;         // batches each loader thread prepares ahead
  bool augment = false;            // random crop (and flip for cifar10) of training images
  bool drop_last = true;  // each epoch's last partial batch per rank is dropped (the reference's DataLoader)
};

}  // namespace ddptrain
