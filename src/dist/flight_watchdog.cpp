#include "dist/flight_watchdog.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "dist/flight_verdict.h"
#include "util/json_text.h"

namespace ddptrain {
namespace {

const std::string kFlag = "ddptrain/flight/dump";

}  // namespace

FlightWatchdog::FlightWatchdog(std::shared_ptr<const BoundedStore> store, const FlightRecorder& recorder,
                               int rank, int world, std::string dir, std::string launch_dir)
    : store_(std::move(store)),
      recorder_(recorder),
      rank_(rank),
      world_(world),
      dir_(std::move(dir)),
      launch_dir_(std::move(launch_dir)) {
  // An earlier start's records were set aside before it starts (DistContext::set_flight_dir).
  thread_ = std::thread([this] { loop(); });
}

FlightWatchdog::~FlightWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void FlightWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && !written_) {
    cv_.wait_for(lock, std::chrono::milliseconds(500));
    if (stop_ || written_) break;
    lock.unlock();
    if (answer_launcher()) return;
    bool raised = false;
    try {
      raised = store_->check({kFlag});
    } catch (const std::exception&) {  // the store is gone (rank 0 ended): nothing to answer
      return;
    }
    if (raised) write("another rank's collective failed (the flag in the store)");
    lock.lock();
  }
}

void FlightWatchdog::write(const std::string& reason) {
  if (written_.exchange(true)) return;
  try {
    std::filesystem::create_directories(dir_);
    std::error_code ec;
    write_flight_file(flight_record_path(dir_, rank_), json_text(recorder_.to_json(rank_, world_, reason), 1),
                      ec);
    if (ec) throw std::filesystem::filesystem_error("rename", ec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] flight recorder: cannot write its record into %s: %s\n", rank_,
                 dir_.c_str(), e.what());
  }
}

bool FlightWatchdog::answer_launcher() {
  if (launch_dir_.empty()) return false;
  std::error_code ec;
  const std::string request = flight_request_path(launch_dir_);
  if (std::filesystem::exists(request, ec)) {
    std::ifstream in(request);
    std::string reason;
    std::getline(in, reason);
    raise(reason.empty() ? "the launcher saw a stall" : reason, /*wait_s=*/0);
    return true;
  }
  nlohmann::json p = recorder_.progress();
  p["rank"] = rank_;
  p["flight_dir"] = dir_;
  std::string text = json_text(p);
  if (text == last_progress_) return false;
  write_flight_file(flight_progress_path(launch_dir_, rank_), text,
                    ec);  // failing: the launch folder is gone
  last_progress_ = std::move(text);
  return false;
}

std::string FlightWatchdog::raise(const std::string& reason, double wait_s) {
  write(reason);
  try {
    store_->set(kFlag, std::vector<uint8_t>{1});
  } catch (const std::exception&) {  // the store is gone: the others are too
  }
  int world = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (std::chrono::steady_clock::now() < until &&
         read_flight_records(dir_, world).size() < static_cast<size_t>(world_))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto records = read_flight_records(dir_, world);
  return hang_verdict(records, world_);
}

}  // namespace ddptrain
