// `ddptrain plot RUN.jsonl [MORE.jsonl ...] -o run.svg`: metrics files (--metrics_file) as a
// self-contained SVG: loss (train per step line, evaluation per epoch), accuracy (train and
// test per epoch), samples/s and MFU (%) over optimizer steps. Several files are overlaid,
// and each run in a file (its records' "run" id: a file that several runs appended to) is its
// own line.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "obs/svg_plot.h"
#include "tools/commands.h"
#include "util/error.h"
#include "util/files.h"

namespace ddptrain {
namespace {

struct Run {
  std::string id;  // the records' "run" ("" in files written before run ids)
  std::vector<nlohmann::json> records;
};

// The records of a metrics file, grouped by run in the order the runs first appear.
std::vector<Run> read_runs(const std::string& path) {
  std::ifstream in(path);
  DDP_USAGE_CHECK(in.good(), "cannot read metrics file '", path, "' (written by train --metrics_file)");
  std::vector<Run> runs;
  int line_no = 0, cut = 0;
  std::string first_cut;
  for (std::string text; std::getline(in, text);) {
    ++line_no;
    if (text.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      // A line cut short by a killed run: left out and said, the rest is drawn.
      if (cut++ == 0) first_cut = detail::concat(path, ":", line_no, " (", e.what(), ")");
      continue;
    }
    // A metrics record: an object with its kind (a string), its step and its run (where given)
    // of their types; anything else is another file than train --metrics_file wrote.
    const bool record = j.is_object() && j.contains("kind") && j["kind"].is_string() &&
                        (!j.contains("step") || j["step"].is_number()) &&
                        (!j.contains("run") || j["run"].is_string());
    DDP_USAGE_CHECK(record, path, ":", line_no,
                    " is not a metrics record (a JSON object with \"kind\", a numeric \"step\" and a string ",
                    "\"run\"): pass the file train --metrics_file wrote");
    const std::string id = j.value("run", "");
    auto it = std::find_if(runs.begin(), runs.end(), [&](const Run& r) { return r.id == id; });
    if (it == runs.end()) it = runs.insert(runs.end(), Run{id, {}});
    it->records.push_back(std::move(j));
  }
  if (cut > 0)
    std::fprintf(
        stderr,
        "plot: left out %d line%s of %s that %s not JSON (a run killed while writing?), the first %s\n", cut,
        cut == 1 ? "" : "s", path.c_str(), cut == 1 ? "is" : "are", first_cut.c_str());
  return runs;
}

// The runs that trained (a step or an epoch record); `ddptrain eval`'s runs (an "eval" record
// alone) have nothing to draw here, and are said on stderr.
std::vector<Run> trained_runs(std::vector<Run> runs, const std::string& path) {
  const auto trained = [](const Run& r) {
    return std::any_of(r.records.begin(), r.records.end(), [](const nlohmann::json& j) {
      const std::string kind = j.value("kind", "");
      return kind == "step" || kind == "epoch";
    });
  };
  const auto kept = std::remove_if(runs.begin(), runs.end(), [&](const Run& r) { return !trained(r); });
  const auto evals = runs.end() - kept;
  if (evals > 0)
    std::fprintf(stderr, "plot: %s: left out %ld run%s with no step or epoch record (ddptrain eval's)\n",
                 path.c_str(), static_cast<long>(evals), evals == 1 ? "" : "s");
  runs.erase(kept, runs.end());
  return runs;
}

// A resumed run (its "run" record at step S > 0) trains the steps after S again: an earlier
// run's records past S are of steps it replaced (killed after its last save, or a branch the
// resume abandoned), and are left out, as TensorBoard leaves them out, and said on stderr. A
// launcher's restart ("restart_count") that started afresh (the failed attempt had saved
// nothing) replaces the attempt before it, whole.
void drop_replaced_records(std::vector<Run>& runs, const std::string& path) {
  double cut = std::numeric_limits<double>::infinity();
  bool restarted_after = false;  // the next run is a launcher's restart that started afresh
  for (size_t k = runs.size(); k-- > 0;) {
    std::vector<nlohmann::json>& records = runs[k].records;
    const double here = restarted_after ? 0.0 : cut;  // a fresh restart replaces its attempt only
    const auto replaced = [&](const nlohmann::json& j) {
      const std::string kind = j.value("kind", "");
      return (kind == "step" || kind == "epoch") && j.value("step", 0.0) > here;
    };
    const auto kept = std::remove_if(records.begin(), records.end(), replaced);
    if (kept != records.end())
      std::fprintf(
          stderr,
          "plot: %s: left out %ld records of run %zu past step %.0f, which a resumed run trained again\n",
          path.c_str(), static_cast<long>(records.end() - kept), k + 1, here);
    records.erase(kept, records.end());
    restarted_after = false;
    for (const auto& j : records) {
      if (j.value("kind", "") != "run") continue;
      if (j.value("step", 0.0) > 0) cut = std::min(cut, j.value("step", 0.0));
      if (j.value("step", 0.0) == 0 && j.value("restart_count", 0) > 0) restarted_after = true;
    }
  }
}

// The values a file holds as null where a number is drawn: a NaN or an infinity (a loss that
// diverged), which JSON lacks and the metrics file writes as null. Left out of the lines, and said.
struct NotNumbers {
  int count = 0;
  std::string first;  // "loss at step 12"
};

// One run's lines in the four panels, labelled `name` and drawn in palette colour c.
void add_run(std::vector<Panel>& panels, const std::string& name, int c, const Run& run, NotNumbers& nulls) {
  Line loss{name + "train", {}, c, false}, eval_loss{name + "test", {}, c, true};
  Line train_acc{name + "train", {}, c, false}, test_acc{name + "test", {}, c, true};
  Line sps{name + "samples/s", {}, c, false}, mfu{name + "MFU", {}, c, false};
  for (const auto& j : run.records) {
    const double step = j.value("step", 0.0);
    auto add = [&](Line& l, const char* key, double scale = 1.0) {
      if (!j.contains(key)) return;
      if (j[key].is_number()) l.xy.emplace_back(step, scale * j[key].get<double>());
      if (j[key].is_null() && nulls.count++ == 0) nulls.first = str(key, " at step ", step);
    };
    if (j.value("kind", "") == "step") {
      add(loss, "loss");
      add(sps, "samples_per_s");
      add(mfu, "mfu", 100.0);  // percent, as the step lines print it
    } else if (j.value("kind", "") == "epoch") {
      add(eval_loss, "test_loss");
      add(train_acc, "train_acc");
      add(test_acc, "test_acc");
    }
  }
  panels[0].lines.push_back(loss);
  panels[0].lines.push_back(eval_loss);
  panels[1].lines.push_back(train_acc);
  panels[1].lines.push_back(test_acc);
  panels[2].lines.push_back(sps);
  panels[3].lines.push_back(mfu);
}

// Each input's legend prefix: its file stem, or folder/stem where two inputs share a stem
// (a/metrics.jsonl and b/metrics.jsonl); "" for a single input.
std::vector<std::string> input_labels(const std::vector<std::string>& inputs) {
  std::vector<std::string> labels;
  for (const std::string& path : inputs) {
    const std::filesystem::path p(path);
    const bool shared = std::count_if(inputs.begin(), inputs.end(), [&](const std::string& other) {
                          return std::filesystem::path(other).stem() == p.stem();
                        }) > 1;
    const std::string folder = std::filesystem::absolute(p).parent_path().filename().string();
    labels.push_back(inputs.size() == 1 ? "" : (shared ? folder + "/" : "") + p.stem().string() + " ");
  }
  return labels;
}

}  // namespace

int cmd_plot(const std::vector<std::string>& args) {
  const char* usage = "usage: ddptrain plot METRICS.jsonl [MORE.jsonl ...] -o OUT.svg";
  std::vector<std::string> inputs;
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-h" || args[i] == "--help") {
      std::printf("%s\n", usage);
      return 0;
    }
    if (args[i] == "-o" || args[i] == "--out") {
      DDP_USAGE_CHECK(i + 1 < args.size(), args[i], " needs a file name; ", usage);
      out = args[++i];
    } else if (args[i].rfind("--out=", 0) == 0 ||
               args[i].rfind("-o=", 0) == 0) {  // as every command's --name=value
      out = args[i].substr(args[i].find('=') + 1);
    } else {
      DDP_USAGE_CHECK(args[i].rfind("-", 0) != 0, "unknown option '", args[i], "'; ", usage);
      inputs.push_back(args[i]);
    }
  }
  DDP_USAGE_CHECK(!inputs.empty() && !out.empty(), usage);
  DDP_USAGE_CHECK(std::filesystem::path(out).extension() == ".svg", "-o '", out,
                  "': plot writes SVG only; name the ", "output ",
                  std::filesystem::path(out).replace_extension(".svg").string(),
                  " (convert it with any SVG tool, e.g. rsvg-convert, for another format)");
  std::vector<Panel> panels = {{"loss", {}}, {"accuracy", {}}, {"samples/s (global)", {}}, {"MFU (%)", {}}};
  int color = 0, drawn = 0;
  const std::vector<std::string> labels = input_labels(inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<Run> runs = read_runs(inputs[i]);
    DDP_USAGE_CHECK(!runs.empty(), "metrics file '", inputs[i],
                    "' holds no records: nothing to plot (is it the ",
                    "file train --metrics_file wrote, and did that run reach its first step?)");
    runs = trained_runs(std::move(runs), inputs[i]);
    drop_replaced_records(runs, inputs[i]);
    NotNumbers nulls;
    for (size_t k = 0; k < runs.size(); ++k, ++drawn)
      add_run(panels, runs.size() > 1 ? labels[i] + "run " + std::to_string(k + 1) + " " : labels[i], color++,
              runs[k], nulls);
    if (nulls.count > 0)
      std::fprintf(stderr,
                   "plot: %s: left out %d value%s that %s null (a NaN or an infinity, which JSON lacks: a "
                   "loss that diverged?), the first the %s\n",
                   inputs[i].c_str(), nulls.count, nulls.count == 1 ? "" : "s",
                   nulls.count == 1 ? "is" : "are", nulls.first.c_str());
  }
  DDP_USAGE_CHECK(drawn > 0, "no run in ", inputs.size() == 1 ? inputs[0] : std::string("the inputs"),
                  " has a step or an epoch record: nothing to plot (ddptrain eval's records alone)");
  create_parent_folder(out);
  write_file_atomic(out, render_svg(panels));
  std::printf("wrote %s (%d run%s)\n", out.c_str(), drawn, drawn == 1 ? "" : "s");
  return 0;
}

}  // namespace ddptrain
