// What the flight records of a hung or failed job say (Note [Flight recorder]): which rank is
// behind and where, which ranks left no record, or which ranks disagree on a collective.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddptrain {

/// records: rank -> its flight_rank<r>.json; world: the job's size. One line per finding, e.g.
/// "rank 1 is behind: ranks 0,2,3 wait in collective #812 (all_reduce, gradient bucket 0, step
/// 204); rank 1 completed #811 and has been in data for 63 s".
std::string hang_verdict(const std::map<int, nlohmann::json>& records, int world);

/// The files a launcher and its workers share in the launch folder (DDPTRAIN_LAUNCH_DIR; Note
/// [Stall seen by the launcher]): each rank's progress, and the launcher's request for records.
std::string flight_progress_path(const std::string& launch_dir, int rank);
std::string flight_request_path(const std::string& launch_dir);

/// Reads DIR/flight_rank*.json (rank -> record); world: the largest "world" among them (0: none).
std::map<int, nlohmann::json> read_flight_records(const std::string& dir, int& world);

/// DIR/flight_rank<rank>.json: where a rank writes its record.
std::string flight_record_path(const std::string& dir, int rank);

/// "0,2,3": ranks as the verdicts and the logs list them.
std::string ranks_list(const std::vector<int>& ranks);

/// Where a start moves the records an earlier run or attempt left in DIR (readers take any
/// flight_rank<r>.json there as this run's): DIR/.flight.previous, which `ddptrain inspect hang`
/// reads as it reads DIR.
std::string previous_flight_dir(const std::string& dir);

/// The ranks whose flight_rank<r>.json is in DIR, in order.
std::vector<int> flight_record_ranks(const std::string& dir);

/// Removes previous_flight_dir(DIR) (an older hang's records: a start that has records to set
/// aside makes room for them, so the folder holds one hang's, not a mix of two).
void clear_previous_flight_records(const std::string& dir);

/// Moves DIR/flight_rank<rank>.json into previous_flight_dir(DIR) (none: nothing); one that
/// cannot be moved is removed, since it would be read as this run's. An error where neither can be.
void set_aside_flight_record(const std::string& dir, int rank);

/// One flight file's JSON, or nullopt when it is missing or not (yet) whole JSON.
std::optional<nlohmann::json> read_flight_file(const std::string& path);

/// Writes text (and a newline) to path through path.tmp and a rename, so that a reader sees
/// the old file or the new one, whole; ec says why not (e.g. the folder is gone).
void write_flight_file(const std::string& path, const std::string& text, std::error_code& ec);

}  // namespace ddptrain
