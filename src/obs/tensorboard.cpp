#include "obs/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "util/clock.h"
#include "util/error.h"
#include "util/files.h"

namespace ddptrain {
namespace {

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reversed Castagnoli
    t[i] = c;
  }
  return t;
}

// Protocol buffer wire format, the few pieces an Event needs.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wire_type) {
  varint(out, static_cast<uint64_t>(field << 3 | wire_type));
}
void fixed(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}  // LE host
void bytes_field(std::string& out, int field, const std::string& b) {
  key(out, field, 2);
  varint(out, b.size());
  out += b;
}

// Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 | summary = 5}.
std::string event_header(double wall_time, int64_t step) {
  std::string e;
  key(e, 1, 1);
  fixed(e, &wall_time, 8);
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, bool is_main) {
  if (dir.empty() || !is_main) return;
  create_output_folder(dir, "the TensorBoard folder");
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  // As SummaryWriter names it, with the process: two jobs on a host writing into one folder in
  // the same second appended to one file.
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(unix_seconds())) + "." + host +
          "." + std::to_string(::getpid());
  out_ = std::make_unique<std::ofstream>(path_, std::ios::binary | std::ios::app);
  if (!out_->good())
    throw UsageError(str("cannot open the TensorBoard event file '", path_, "' (", std::strerror(errno),
                         "): give a --tensorboard_dir this user can write"));
  std::string e = event_header(unix_seconds(), 0);
  bytes_field(e, 3, "brain.Event:2");
  write_record(e);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  if (!out_) return;
  std::string v;  // Summary.Value{tag = 1, simple_value = 2 (float)}
  bytes_field(v, 1, tag);
  const float f = static_cast<float>(value);
  key(v, 2, 5);
  fixed(v, &f, 4);
  std::string summary;  // Summary{repeated Value value = 1}
  bytes_field(summary, 1, v);
  std::string e = event_header(unix_seconds(), step);
  bytes_field(e, 5, summary);
  write_record(e);
}

void TensorBoardWriter::session_start(int64_t step) {
  if (!out_) return;
  std::string log;  // SessionLog{status = 1 (enum; START = 1)}
  key(log, 1, 0);
  varint(log, 1);
  std::string e = event_header(unix_seconds(), step);
  bytes_field(e, 7, log);  // Event.session_log = 7 (6 is the deprecated log_message)
  write_record(e);
}

void TensorBoardWriter::write_record(const std::string& event) {
  const uint64_t len = event.size();
  const uint32_t len_crc = masked_crc32c(&len, 8), data_crc = masked_crc32c(event.data(), event.size());
  out_->write(reinterpret_cast<const char*>(&len), 8);
  out_->write(reinterpret_cast<const char*>(&len_crc), 4);
  out_->write(event.data(), static_cast<std::streamsize>(event.size()));
  out_->write(reinterpret_cast<const char*>(&data_crc), 4);
  out_->flush();
}

}  // namespace ddptrain
