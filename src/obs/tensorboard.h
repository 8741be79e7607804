// TensorBoard scalars without TensorFlow (--tensorboard_dir DIR, rank 0): the tfevents file
// format. Each record is: length (uint64 LE), masked CRC-32C of the length, the bytes of a
// tensorflow.Event protocol buffer, masked CRC-32C of those bytes. The first event carries
// file_version "brain.Event:2"; each scalar is an Event{wall_time, step, summary{value{tag,
// simple_value}}}. The protobuf bytes are written by hand (a few fields; no protobuf library).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

namespace ddptrain {

/// CRC-32C (Castagnoli), and TensorFlow's masking of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  /// Inactive when dir is empty or this is not rank 0; else creates
  /// DIR/events.out.tfevents.<unix time>.<host>.
  TensorBoardWriter(const std::string& dir, bool is_main);
  bool active() const { return out_ != nullptr; }
  const std::string& path() const { return path_; }
  void scalar(const std::string& tag, double value, int64_t step);
  /// A resumed run's start at `step` (its first): Event{session_log{status START}}, on which
  /// TensorBoard's reader drops what earlier files of the folder logged at `step` and after
  /// (the steps between the checkpoint and the crash, trained again), as PyTorch's
  /// SummaryWriter(purge_step=...) does.
  void session_start(int64_t step);

 private:
  void write_record(const std::string& event);
  std::unique_ptr<std::ofstream> out_;
  std::string path_;
};

}  // namespace ddptrain
