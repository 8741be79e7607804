// The flight recorder's watchdog (Note [Flight recorder]): a thread of each rank that polls the
// job's store for the dump flag every half second and then writes this rank's record, once,
// whatever its main thread is doing; raise() is the failing rank's side. Under ddptrain launch
// (a launch folder) it also publishes this rank's progress there and answers the launcher's
// request for records (Note [Stall seen by the launcher]).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dist/bounded_store.h"
#include "dist/flight_recorder.h"

namespace ddptrain {

class FlightWatchdog {
 public:
  FlightWatchdog(std::shared_ptr<const BoundedStore> store, const FlightRecorder& recorder, int rank,
                 int world, std::string dir, std::string launch_dir = "");
  ~FlightWatchdog();
  FlightWatchdog(const FlightWatchdog&) = delete;
  FlightWatchdog& operator=(const FlightWatchdog&) = delete;

  /// This rank's collective failed: writes its record, raises the flag for the others, waits
  /// up to wait_s for their records and returns the verdict (dist/flight_verdict.h).
  std::string raise(const std::string& reason, double wait_s = 3.0);
  const std::string& dir() const { return dir_; }

 private:
  void loop();
  void write(const std::string& reason);
  /// Under a launcher: writes the progress file when it changed; true when the launcher asks
  /// for the records (then they are written and the flag raised).
  bool answer_launcher();

  std::shared_ptr<const BoundedStore> store_;
  const FlightRecorder& recorder_;
  int rank_, world_;
  std::string dir_, launch_dir_;
  std::string last_progress_;
  std::atomic<bool> written_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddptrain
