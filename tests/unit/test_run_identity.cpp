// Note [Run identity]: what a checkpoint records of its run, what a resume may change, and
// docs/checkpoints.md's list of the latter, kept equal to the code's.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "config/run_identity.h"
#include "config/train_config.h"

using namespace ddptrain;

TEST(RunIdentity, RecordsWhatDefinesTheRunNotWhatAResumeMayChange) {
  const RunIdentity id = run_identity(resolve_train_config({}));
  for (const char* f : {"lr", "seed", "model", "dataset", "optimizer", "grad_accum_steps", "width"})
    EXPECT_TRUE(id.count(f)) << f;
  for (const char* f : {"max_steps", "epochs", "checkpoint_dir", "resume_from", "threads", "log_interval",
                        "data_dir", "batch_size"})
    EXPECT_FALSE(id.count(f)) << f;
  const RunIdentity other = run_identity(
      resolve_train_config({"--lr", "0.05", "--seed", "7", "--max_steps", "5", "--threads", "1"}));
  const auto diff = identity_differences(other, id, "--");
  ASSERT_EQ(diff.size(), 2u);
  EXPECT_EQ(diff[0].rfind("--lr 0.05 (the checkpoint's: 0.01", 0), 0u) << diff[0];
  EXPECT_EQ(diff[1], "--seed 7 (the checkpoint's: 42)");
  EXPECT_TRUE(identity_differences(id, id).empty());
  EXPECT_EQ(identity_differences(other, id)[1], "seed 7 (the checkpoint's: 42)")
      << "the library names entries as they are";
  EXPECT_TRUE(identity_differences(id, {}).empty()) << "a checkpoint without an identity matches any run";
}

TEST(RunIdentity, TheCheckpointsPageListsExactlyTheFlagsAResumeMayChange) {
  TrainConfig c;
  std::set<std::string> train;
  for (const Flag& f : train_flags(c)) train.insert(f.name);
  const auto& free = flags_that_may_change_on_resume();
  for (const auto& f : free) EXPECT_TRUE(train.count(f)) << f << " is not a train flag";
  std::ifstream in(std::string(DDPTRAIN_SOURCE_DIR) + "/docs/checkpoints.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const auto begin = readme.find("A resume may change only:");
  ASSERT_NE(begin, std::string::npos);
  const auto end = readme.find("(a test checks", begin);
  ASSERT_NE(end, std::string::npos);
  const std::string list = readme.substr(begin, end - begin);
  std::set<std::string> listed;
  const std::regex flag("--([a-z_0-9]+)");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), flag); it != std::sregex_iterator(); ++it)
    listed.insert((*it)[1]);
  EXPECT_EQ(listed, std::set<std::string>(free.begin(), free.end()));
}
