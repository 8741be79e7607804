// The commands' words as a user reads them (#18 item 7, #29 item 8): each --help lists its
// own flags once, and every flag the docs name is one some command's --help lists.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

// Item 7: eval --help listed no flags; the help omitted inspect model and loader; an unknown
// inspect target printed the sampler's help with exit 0; launch -n 200 train --help started
// 200 workers that each printed the help.
TEST(UserIntent, EveryHelpListsItsOwnFlagsOnce) {
  ProcResult eval = run({binary(), "eval", "--help"}, {}, 60);
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
  for (const char* flag : {"--data_dir", "--batch_size", "--num_workers"})
    EXPECT_NE(eval.output.find(flag), std::string::npos) << flag << "\n" << eval.output;
  ProcResult top = run({binary(), "--help"}, {}, 60);
  EXPECT_EQ(top.exit_code, 0) << top.output;
  for (const char* line : {"ddptrain inspect sampler", "ddptrain inspect model", "ddptrain inspect loader"})
    EXPECT_NE(top.output.find(line), std::string::npos) << line << "\n" << top.output;
  ProcResult inspect = run({binary(), "inspect", "--help"}, {}, 60);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  for (const char* line : {"\n  sampler ", "\n  model ", "\n  loader "})
    EXPECT_NE(inspect.output.find(line), std::string::npos) << line << "\n" << inspect.output;
  ProcResult unknown = run({binary(), "inspect", "foo", "--help"}, {}, 60);
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("inspect: unknown target 'foo'"), std::string::npos) << unknown.output;
  ProcResult launch = run({binary(), "launch", "--nproc_per_node", "200", "train", "--help"}, {}, 60);
  EXPECT_EQ(launch.exit_code, 0) << launch.output;
  EXPECT_EQ(count_of(launch.output, "usage: ddptrain train [options]"), 1u) << launch.output.substr(0, 2000);
}

// #29 item 8: every flag the docs name (README.md and docs/*.md but the session log,
// docs/status.md) is one that some ddptrain command's --help lists, or another tool's flag
// on this list: a renamed or removed flag cannot stay in the docs.
TEST(UserIntent, EveryFlagTheDocsNameExists) {
  std::string helps;
  for (std::vector<std::string> c : std::vector<std::vector<std::string>>{{"train"},
                                                                          {"launch"},
                                                                          {"eval"},
                                                                          {"export"},
                                                                          {"plot"},
                                                                          {"inspect", "model"},
                                                                          {"inspect", "sampler"},
                                                                          {"inspect", "loader"},
                                                                          {"inspect", "hang"}}) {
    std::vector<std::string> a = {binary()};
    a.insert(a.end(), c.begin(), c.end());
    a.push_back("--help");
    ProcResult r = run(a, {}, 60);
    ASSERT_EQ(r.exit_code, 0) << c[0] << ": " << r.output;
    helps += r.output;
  }
  const std::set<std::string> others = {"--build",
                                        "--install",
                                        "--prefix",
                                        "--target",  // cmake
                                        "--no_python",
                                        "--no-python",
                                        "--rdzv_backend",
                                        "--rdzv_endpoint",
                                        "--rdzv_id",
                                        "--standalone",
                                        "--signals_to_handle",
                                        "--shutdown_timeout",  // torchrun
                                        "--signal",            // Slurm's sbatch
                                        "--ntasks-per-node",   // Slurm's srun
                                        "--binary",            // scripts/gpu_deps.sh
                                        "--steps"};            // scripts/profile_table.py
  std::vector<std::string> pages = {source_dir() + "/README.md"};
  for (const auto& e : fs::directory_iterator(source_dir() + "/docs"))
    if (e.path().extension() == ".md" && e.path().filename() != "status.md")
      pages.push_back(e.path().string());
  size_t checked = 0;
  for (const auto& page : pages) {
    const std::string text = read_text(page);
    for (size_t at = text.find("--"); at != std::string::npos; at = text.find("--", at + 2)) {
      size_t end = at + 2;
      while (end < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_' || text[end] == '-'))
        ++end;
      std::string flag = text.substr(at, end - at);
      while (!flag.empty() && flag.back() == '-') flag.pop_back();
      if (flag.size() < 3 || !std::islower(static_cast<unsigned char>(flag[2])) ||
          (at > 0 && text[at - 1] == '-'))
        continue;  // not a flag: "---", "--" alone, a table rule
      if (others.count(flag)) continue;
      const std::string name = flag.rfind("--no-", 0) == 0 ? flag.substr(5) : flag.substr(2);
      ++checked;
      const bool listed = helps.find("--" + name + " ") != std::string::npos ||
                          helps.find("--" + name + "\n") != std::string::npos ||
                          helps.find("--" + name + ",") != std::string::npos ||
                          helps.find("--" + name + "]") != std::string::npos ||
                          helps.find("--[no-]" + name) != std::string::npos;
      EXPECT_TRUE(listed) << page << " names " << flag << ", which no ddptrain --help lists";
    }
  }
  EXPECT_GT(checked, 100u) << "the docs name flags; the scan found too few";
}
