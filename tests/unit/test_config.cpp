// TrainConfig: defaults equal the reference's, TOML + flag override, and every bad input is
// a UsageError whose message names the flag, the value and the fix.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "config/train_config.h"
#include "util/error.h"
#include "util/json_text.h"

using namespace ddptrain;

namespace {
std::string usage_error_of(const std::vector<std::string>& args, const std::vector<std::string>& base = {}) {
  try {
    resolve_train_config(args, base);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

std::string temp_file(const std::string& name, const std::string& text) {
  std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}
}  // namespace

TEST(Config, DefaultsMatchReference) {
  TrainConfig c = resolve_train_config({});
  EXPECT_EQ(c.data.num_classes, 10);
  EXPECT_EQ(c.data.in_channels, 3);
  EXPECT_EQ(c.data.image_size, 0);
  EXPECT_EQ(c.data.image_size_or_default(), 32);
  EXPECT_EQ(c.data.dataset_size, 50000);
  EXPECT_EQ(c.trainer.data.batch_size, 64);
  EXPECT_EQ(c.trainer.data.num_workers, 4);
  EXPECT_EQ(c.trainer.loop.epochs, 10);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.01);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 1e-4);
  EXPECT_EQ(c.dist.backend, "auto");
  EXPECT_TRUE(c.trainer.precision.use_amp);
  EXPECT_EQ(c.trainer.precision.amp_dtype, AmpDtype::kAuto);
  EXPECT_EQ(c.trainer.loop.grad_accum_steps, 1);
  EXPECT_EQ(c.trainer.checkpoint.dir, "./checkpoints");
  EXPECT_EQ(c.trainer.checkpoint.save_every, 1);
  EXPECT_EQ(c.trainer.checkpoint.resume_from, "");
  EXPECT_EQ(c.trainer.report.log_interval, 10);
  EXPECT_FALSE(c.trainer.report.enable_profiling);
  EXPECT_EQ(c.trainer.loop.seed, 42);
  EXPECT_EQ(c.data.dataset, DatasetKind::kSynthetic);
  EXPECT_EQ(c.data.data_dir, "");  // the dataset's own default (fashion-mnist only): datasets.h
  EXPECT_EQ(c.model.model, ModelKind::kMiniResnet);
  EXPECT_DOUBLE_EQ(c.model.width, 1.0);
  EXPECT_EQ(c.trainer.loop.max_steps, 0);
  EXPECT_EQ(c.dist.dist_timeout_s, 600);
  EXPECT_FALSE(c.trainer.ddp.bucket_cap_mb.has_value());  // auto
}

TEST(Config, FlagsParseAllForms) {
  TrainConfig c =
      resolve_train_config({"--batch_size", "32", "--lr=0.5", "--no-use_amp", "--enable_profiling", "--width",
                            "0.25", "--dataset", "fashion-mnist"});
  EXPECT_EQ(c.trainer.data.batch_size, 32);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.5);
  EXPECT_FALSE(c.trainer.precision.use_amp);
  EXPECT_TRUE(c.trainer.report.enable_profiling);
  EXPECT_DOUBLE_EQ(c.model.width, 0.25);
  EXPECT_EQ(c.data.dataset, DatasetKind::kFashionMnist);
}

TEST(Config, TomlThenFlagsOverride) {
  std::string path = temp_file("cfg.toml",
                               "batch_size = 16\nlr = 0.2\nuse_amp = false\nepochs = 3\n"
                               "dataset = \"synthetic\"\nweight_decay = 0\n");
  TrainConfig c = resolve_train_config({"--epochs", "5", "--config", path});
  EXPECT_EQ(c.trainer.data.batch_size, 16);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.2);
  EXPECT_FALSE(c.trainer.precision.use_amp);
  EXPECT_EQ(c.trainer.loop.epochs, 5);              // the flag wins over the file
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.0);  // an integer is accepted for a number
}

TEST(Config, BadInputsNameFlagValueAndFix) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  } cases[] = {
      // A rule of the Trainer's options, named by the flags bound to the fields (Note [Options
      // named by their field]): the library says TrainerOptions::data.batch_size.
      {{"--batch_size", "0"},
       "--batch_size=0 must be > 0; pass the per-rank batch size, e.g. --batch_size 64"},
      {{"--zero_stage", "2", "--ddp_comm_hook", "fp16"},
       "--zero_stage 2 keeps only this rank's gradient shard: it does not combine with --ddp_comm_hook or "
       "--gradient_as_bucket_view; drop those, or use --zero_stage 1"},
      {{"--seed", "-1"}, "--seed=-1 is out of range: it must be in [0, 9223372036854775807]"},
      {{"--lr", "-1"}, "--lr=-1 must be > 0"},
      // Braces of the user's text are theirs, not the message's placeholders.
      {{"--resume_from", "/no/{1}/{0:x}"}, "--resume_from='/no/{1}/{0:x}' is not a checkpoint directory"},
      {{"--width", "0"}, "--width=0 must be in (0, 64]"},
      {{"--bogus", "1"}, "unknown option '--bogus'"},
      {{"--batch_sz", "1"}, "did you mean --batch_size?"},
      {{"--batch_size", "abc"}, "--batch_size='abc' is not an integer"},
      {{"--lr", "fast"}, "--lr='fast' is not a number"},
      {{"--use_amp=maybe"}, "--use_amp='maybe' is not a boolean"},
      {{"--epochs"}, "--epochs needs a value"},
      {{"--backend", "mpi"}, "--backend='mpi' is not a known backend"},
      {{"--dataset", "imagenet"},
       "--dataset='imagenet' is not one of synthetic, fashion-mnist, mnist, cifar10, tensors, tokens, text"},
      {{"--prefetch_factor", "0"}, "--prefetch_factor=0 must be > 0"},
      {{"--augment"}, "--augment has no recipe for --dataset synthetic"},
      {{"--min_lr_ratio", "2"}, "--min_lr_ratio=2 must be in [0, 1]"},
      {{"--eval_every", "-1"}, "--eval_every=-1 must be >= 0"},
      {{"--amp_dtype", "fp8"}, "--amp_dtype='fp8' is not one of auto, fp16, bf16"},
      {{"--activation_checkpointing", "all"}, "--activation_checkpointing='all' is not one of none, blocks"},
      {{"--clip_grad_norm", "-1"}, "--clip_grad_norm=-1 must be >= 0"},
      {{"--config", "/nonexistent.toml"}, "--config='/nonexistent.toml' does not exist"},
      {{"--resume_from", "/nonexistent_ckpt"},
       "--resume_from='/nonexistent_ckpt' is not a checkpoint directory"},
      {{"--grad_accum_steps", "0"}, "--grad_accum_steps=0 must be > 0"},
      {{"--bucket_cap_mb", "0"},
       "--bucket_cap_mb=0 must be in [9.53674e-07, 1.04858e+06] MiB; pass e.g. --bucket_cap_mb 25, or auto"},
      {{"--bucket_cap_mb", "big"},
       "--bucket_cap_mb='big' is not a number; pass auto or e.g. --bucket_cap_mb 25"},
      {{"stray"}, "unexpected argument 'stray'"},
      // The loss scaler's settings where no scaler runs.
      {{"--amp_dtype", "bf16", "--scaler_init_scale", "1024"},
       "this run has none (bf16 autocast needs none)"},
      {{"--grad_scaler", "off", "--scaler_growth_interval", "10"}, "this run has none (--grad_scaler off)"},
      {{"--no-use_amp", "--scaler_init_scale", "8"}, "this run has none (no autocast: --no-use_amp)"},
      // Flags that would be ignored (before, accepted without a word).
      {{"--dataset", "tensors", "--data_dir", "/tmp", "--loss", "mse", "--fused_loss", "on"},
       "--fused_loss on fuses cross-entropy into the logits' pass; --loss mse has none"},
      {{"--no-use_amp", "--amp_dtype", "bf16"}, "--amp_dtype bf16 is autocast's dtype, and --no-use_amp"},
      {{"--num_workers", "0", "--prefetch_factor", "8"}, "--num_workers 0 has none"},
      {{"--checkpoint_dir", "", "--save_every_steps", "100"}, "--checkpoint_dir '' saves nothing"},
      // float32's inf: every step skipped (before, accepted: a run that trained nothing)
      {{"--amp_dtype", "fp16", "--scaler_init_scale", "1e39"},
       "--scaler_init_scale=1e+39 must be at most 3.4e38 (float32's largest)"},
      {{"--checkpoint_dir", "", "--resume_from", "auto"},
       "--resume_from auto resumes from --checkpoint_dir, which is empty (no checkpoints)"},
  };
  for (const auto& c : cases) {
    std::string msg = usage_error_of(c.args);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "args[0]=" << c.args[0] << " got: " << msg;
  }
}

TEST(Config, TheLossScalersSettingsApplyWhereAScalerMayRun) {
  EXPECT_EQ(resolve_train_config({"--amp_dtype", "fp16", "--scaler_init_scale", "1024"})
                .trainer.precision.scaler_init_scale,
            1024.0);
  EXPECT_EQ(resolve_train_config({"--no-use_amp", "--grad_scaler", "on", "--scaler_growth_interval", "5"})
                .trainer.precision.scaler_growth_interval,
            5);
  // amp_dtype auto: the device decides (the Trainer warns where it chose none).
  EXPECT_EQ(resolve_train_config({"--scaler_init_scale", "512"}).trainer.precision.scaler_init_scale, 512.0);
}

// Note [A checkpoint's own flags]: a checkpoint's config.json may hold combinations its
// version took and a later check refuses, in values eval and export never read: they rebuild
// its model all the same. A flag given to eval or export is checked as train checks it,
// against the checkpoint's kinds.
TEST(Config, ACheckpointsOwnFlagsRebuildItsModelWhateverLaterChecksRefuse) {
  const std::vector<std::vector<std::string>> old_checkpoints = {
      {"--optimizer", "sgd", "--adam_beta1", "0.8"},
      {"--optimizer", "adamw", "--momentum", "0.5"},
      {"--lr_schedule", "constant", "--min_lr_ratio", "0.2"},
      {"--amp_dtype", "bf16", "--scaler_init_scale", "1024"},
      {"--fused_loss", "on"},
      {"--no-use_amp", "--amp_dtype", "bf16"},
      {"--num_workers", "0", "--prefetch_factor", "4"},
      {"--model", "mini_resnet", "--block_size", "64", "--vocab_size", "256", "--gpt_preset", "debug",
       "--n_kv_head", "2", "--width", "0.5"},
  };
  for (const auto& flags : old_checkpoints) {
    std::string refused;
    try {
      (void)resolve_train_config(flags);
    } catch (const UsageError& e) {
      refused = e.what();
    }
    EXPECT_NE(refused, "") << flags[1] << ": train refuses it (else the case shows nothing)";
    EXPECT_NO_THROW((void)resolve_train_config({}, flags)) << flags[1];
  }
  const TrainConfig c = resolve_train_config(
      {}, {"--model", "mini_resnet", "--width", "0.5", "--block_size", "64", "--optimizer", "adamw"});
  EXPECT_EQ(c.model.width, 0.5) << "what the model reads stays";
  EXPECT_EQ(c.model.block_size, 0);
  EXPECT_EQ(c.optimizer.optimizer, OptimizerKind::kAdamw);
  const TrainConfig gpt =
      resolve_train_config({}, {"--model", "gpt", "--dataset", "text", "--data_path", "x", "--gpt_preset",
                                "debug", "--block_size", "32", "--vocab_multiple", "64", "--width", "2"});
  EXPECT_EQ(gpt.model.block_size, 32);
  EXPECT_EQ(gpt.model.vocab_multiple, 64);
  EXPECT_EQ(gpt.model.width, 1.0);
  // Given to the command: checked against the checkpoint's kinds.
  EXPECT_NE(usage_error_of({"--adam_beta1", "0.8"}, {"--optimizer", "sgd"}).find("adam_beta1"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--scaler_init_scale", "1024"}, {"--amp_dtype", "bf16"}).find("scaler"),
            std::string::npos);
  EXPECT_EQ(resolve_train_config({"--adam_beta1", "0.8"}, {"--optimizer", "adamw"}).optimizer.adam_beta1,
            0.8);
  // eval's --num_workers 0 on a checkpoint whose run prefetched 4: its own value is forgotten.
  EXPECT_NO_THROW(
      (void)resolve_train_config({"--num_workers", "0"}, {"--num_workers", "8", "--prefetch_factor", "4"}));
}

TEST(Config, BadTomlIsUsageError) {
  EXPECT_NE(usage_error_of({"--config", temp_file("bad1.toml", "batch_size = \"many\"\n")})
                .find("config key 'batch_size'"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--config", temp_file("bad2.toml", "no_such_key = 1\n")}).find("no_such_key"),
            std::string::npos);
  EXPECT_NE(
      usage_error_of({"--config", temp_file("bad3.toml", "lr = = 1\n")}).find("could not be read as TOML"),
      std::string::npos);
  EXPECT_NE(usage_error_of({"--config", temp_file("bad4.toml", "bucket_cap_mb = \"fast\"\n")})
                .find("must be a number or \"auto\"; e.g. bucket_cap_mb = \"auto\""),
            std::string::npos);
  // A key that would be silently ignored, a [section] (its keys are not flags), an array.
  const std::string other = temp_file("other.toml", "lr = 0.5\n");
  EXPECT_NE(usage_error_of({"--config", temp_file("bad5.toml", "config = \"" + other + "\"\n")})
                .find("config key 'config' in "),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--config", temp_file("bad6.toml", "lr = 0.1\n[optim]\nmomentum = 0.5\n")})
                .find("[optim] in "),
            std::string::npos);
  EXPECT_NE(
      usage_error_of({"--config", temp_file("bad7.toml", "lr = [0.1, 0.2]\n")}).find("config key 'lr' in "),
      std::string::npos);
}

TEST(Config, NumberOrAutoFlags) {
  EXPECT_DOUBLE_EQ(*resolve_train_config({"--bucket_cap_mb", "4"}).trainer.ddp.bucket_cap_mb, 4.0);
  EXPECT_FALSE(resolve_train_config({"--bucket_cap_mb=auto"}).trainer.ddp.bucket_cap_mb.has_value());
  EXPECT_DOUBLE_EQ(*resolve_train_config({"--config", temp_file("cap1.toml", "bucket_cap_mb = 2\n")})
                        .trainer.ddp.bucket_cap_mb,
                   2.0);
  EXPECT_DOUBLE_EQ(*resolve_train_config({"--config", temp_file("cap2.toml", "bucket_cap_mb = 0.5\n")})
                        .trainer.ddp.bucket_cap_mb,
                   0.5);
  EXPECT_FALSE(resolve_train_config({"--config", temp_file("cap3.toml", "bucket_cap_mb = \"auto\"\n")})
                   .trainer.ddp.bucket_cap_mb.has_value());
  TrainConfig c = resolve_train_config({"--bucket_cap_mb", "8"});
  EXPECT_DOUBLE_EQ(flags_to_json(train_flags(c))["bucket_cap_mb"].get<double>(), 8.0);
}

TEST(Config, HelpListsEveryFlagWithDefault) {
  TrainConfig c;
  auto table = train_flags(c);
  std::string help = flags_help(table, kTrainUsage);
  for (const auto& f : table) EXPECT_NE(help.find("--" + f.name), std::string::npos) << f.name;
  EXPECT_NE(help.find("--no-use_amp"), std::string::npos);
  EXPECT_NE(help.find("(default: 64)"), std::string::npos);
}

TEST(Config, JsonDumpIsTyped) {
  TrainConfig c;
  auto j = flags_to_json(train_flags(c));
  EXPECT_EQ(j["batch_size"].get<int>(), 64);
  EXPECT_EQ(j["use_amp"].get<bool>(), true);
  EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 0.01);
  EXPECT_EQ(j["backend"].get<std::string>(), "auto");
  EXPECT_EQ(j["bucket_cap_mb"].get<std::string>(), "auto");
}

// Note [Options named by their field]: one error, in the library's words and in the flags'.
TEST(Config, AnOptionErrorNamesTheFieldOrItsFlag) {
  TrainConfig c;
  c.trainer.loop.grad_accum_steps = 0;
  try {
    c.trainer.validate();
    ADD_FAILURE() << "accepted grad_accum_steps 0";
  } catch (const OptionError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "TrainerOptions::loop.grad_accum_steps=0 must be > 0; pass TrainerOptions::loop.grad_accum_steps = 1 "
        "for no accumulation");
    EXPECT_EQ(in_flag_words(e, train_flags(c)),
              "--grad_accum_steps=0 must be > 0; pass --grad_accum_steps 1 for no accumulation");
    // Another table's fields are other fields: the library's name stays, unless the error is
    // placed in a copy of the table's TrainerOptions (the Trainer's own, raised at run time).
    TrainConfig other;
    EXPECT_EQ(in_flag_words(e, train_flags(other)).rfind("TrainerOptions::loop.grad_accum_steps=0", 0), 0u);
    EXPECT_EQ(in_flag_words(e, train_flags(other), &other.trainer).rfind("--grad_accum_steps=0", 0), 0u);
  }
  OptimizerOptions sgd;
  sgd.lr = -1;
  try {
    sgd.validate();
    ADD_FAILURE() << "accepted lr -1";
  } catch (const OptionError& e) {
    EXPECT_EQ(std::string(e.what()),
              "OptimizerOptions::lr=-1 must be > 0; pass e.g. OptimizerOptions::lr = 0.01");
  }
  // The data's and the model's options name their own fields, and a field of the other
  // struct by its whole name; the flags' words are the same error's.
  TrainConfig d;
  d.data.dataset = DatasetKind::kTokens;
  d.data.data_path = "corpus.txt";
  try {
    d.data.validate();
    ADD_FAILURE() << "accepted a data_path for synthetic tokens";
  } catch (const OptionError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "DataOptions::data_path='corpus.txt' is the file of DataOptions::dataset = "
                  "text, DataOptions::dataset = token_shards or DataOptions::dataset = webdataset; "
                  "DataOptions::dataset = tokens "
                  "is synthetic",
                  0),
              0u)
        << e.what();
    EXPECT_EQ(in_flag_words(e, train_flags(d))
                  .rfind("--data_path='corpus.txt' is the file of --dataset text, --dataset "
                         "token_shards or --dataset webdataset; --dataset tokens is synthetic",
                         0),
              0u);
  }
  d.data = DataOptions{};
  d.model.model = ModelKind::kGpt;
  try {
    d.model.validate(d.data);
    ADD_FAILURE() << "accepted gpt on images";
  } catch (const OptionError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "ModelOptions::model = gpt reads tokens, not DataOptions::dataset = synthetic; pass "
        "DataOptions::dataset = tokens (synthetic), DataOptions::dataset = text DataOptions::data_path = "
        "FILE or DataOptions::dataset = token_shards");
    EXPECT_EQ(
        in_flag_words(e, train_flags(d)),
        "--model gpt reads tokens, not --dataset synthetic; pass --dataset tokens (synthetic), --dataset "
        "text --data_path FILE or --dataset token_shards");
  }
  const int x = 0;
  const OptionError literal({{&x, "loop.x"}}, "{0}='" + OptionError::literal("{1}{0:3}{{") + "' {7} {0}");
  EXPECT_EQ(std::string(literal.what()), "TrainerOptions::loop.x='{1}{0:3}{{' {7} TrainerOptions::loop.x");
}

// --init_from_hf: a flag the command line gives must agree with the folder's config.json, a
// value equal to the flag's default included. Before, --rope_theta 10000 (the default) beside a
// config's 500000 gave way to the config without a word, while --rope_theta 20000 was refused.
TEST(Config, AFlagGivenBesideInitFromHfAgreesWithTheConfigEvenAtItsDefault) {
  const std::string dir = testing::TempDir() + "hf_flags_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
    "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64,
    "rope_theta": 500000.0})";
  std::ofstream(dir + "/model.safetensors") << "";  // not read while the flags resolve
  for (const char* theta : {"10000", "20000"}) {
    const std::string e = usage_error_of(
        {"--model", "llama", "--dataset", "tokens", "--init_from_hf", dir, "--rope_theta", theta});
    EXPECT_NE(e.find(std::string("--rope_theta=") + theta + " differs from"), std::string::npos) << e;
    EXPECT_NE(e.find("500000"), std::string::npos) << e;
  }
  EXPECT_EQ(usage_error_of(
                {"--model", "llama", "--dataset", "tokens", "--init_from_hf", dir, "--rope_theta", "500000"}),
            "<no error>");
  EXPECT_EQ(resolve_train_config({"--model", "llama", "--dataset", "tokens", "--init_from_hf", dir})
                .model.rope_theta,
            500000.0);
  std::filesystem::remove_all(dir);
}

// A flag's value is recorded in JSON (config.json, each checkpoint), which holds UTF-8 only: a
// path named in Latin-1 is a usage error naming the flag and the byte (nlohmann's dump threw
// and the run ended at its first log line with a JSON exception).
// A value after a switch: the switch's two spellings (it said only "unexpected argument 'false'").
TEST(Config, AValueGivenToASwitchNamesItsTwoSpellings) {
  EXPECT_NE(
      usage_error_of({"--use_amp", "false"}).find("after --use_amp: a switch takes no value; pass --use_amp"),
      std::string::npos);
  EXPECT_NE(
      usage_error_of({"--batch_size", "8", "stray"}).find("unexpected argument 'stray'; flags start with --"),
      std::string::npos);
}

TEST(Config, AFlagThatIsNotUtf8IsAUsageErrorNamingIt) {
  EXPECT_NE(usage_error_of({"--dataset", "text", "--data_path", "corpus-\xe9.txt"})
                .find("--data_path: the value is not UTF-8 (byte 0xE9 at offset 7)"),
            std::string::npos);
  EXPECT_EQ(first_invalid_utf8("plain/ascii.txt"), std::nullopt);
  EXPECT_EQ(first_invalid_utf8("caf\xc3\xa9/\xe2\x82\xac/\xf0\x9f\x98\x80"), std::nullopt);  // é € 😀
  EXPECT_EQ(first_invalid_utf8("ab\xc0\x80"), 2u);                                           // overlong
  EXPECT_EQ(first_invalid_utf8("\xed\xa0\x80"), 0u);                                         // a surrogate
  EXPECT_EQ(first_invalid_utf8("x\xe2\x82"), 1u);                                            // cut short
  EXPECT_EQ(first_invalid_utf8("\xf4\x90\x80\x80"), 0u);                                     // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("a\x80"), 1u);  // a lone continuation byte
  // Written with U+FFFD where a string holds such bytes (a class folder's name): no exception.
  const nlohmann::json j = {{"class", std::string("caf\xe9")}};
  EXPECT_EQ(nlohmann::json::parse(json_text(j)).at("class").get<std::string>(), "caf\xef\xbf\xbd");
}
