// CLI tier: --from hf-trainer (TrainingArguments / TRL SFTConfig files) and --from accelerate
// (accelerate's config YAML), each fixture in tests/data/from/hf-trainer as the options it
// expands to and as the same run given by hand.
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "cli_support.hpp"

namespace {
namespace fs = std::filesystem;

using vramfit::cli_test::check_refusal, vramfit::cli_test::data_dir, vramfit::cli_test::result,
    vramfit::cli_test::run, vramfit::cli_test::slurp;

const std::string fixtures = data_dir + "/from/hf-trainer/";
const std::string f1 = fixtures + "trl-examples-cli_configs-example_config.yaml";
const std::string f2 = fixtures + "alignment-handbook-recipes-zephyr-7b-beta-sft-config_qlora.yaml";
const std::string f3 = fixtures + "alignment-handbook-recipes-zephyr-7b-beta-sft-config_full.yaml";
const std::string f4 = fixtures + "trl-examples-accelerate_configs-fsdp2.yaml";
const std::string f5 = fixtures + "trl-examples-accelerate_configs-deepspeed_zero3.yaml";
const std::string f6 = fixtures + "trl-scripts-sft.py-lora-example.json";

/// A Hugging Face cache holding the fixtures' models: the test data's Qwen2.5-0.5B, Mistral-7B's
/// config.json, and Qwen2.5-0.5B's standing in for Qwen2-0.5B (the same architecture).
const std::string& hub_env() {
  static const std::string env = [] {
    const std::string dir = fs::absolute("vramfit_from_hf_cache_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::copy(data_dir + "/hf-cache", dir, fs::copy_options::recursive);
    const std::string commit = "0123456789abcdef0123456789abcdef01234567";
    for (const auto& [repo, config] :
         {std::pair{"models--mistralai--Mistral-7B-v0.1", "mistral-7b.json"},
          std::pair{"models--Qwen--Qwen2-0.5B", "qwen2.5-0.5b.json"}}) {
      fs::create_directories(dir + "/" + repo + "/refs");
      fs::create_directories(dir + "/" + repo + "/snapshots/" + commit);
      std::ofstream(dir + "/" + repo + "/refs/main") << commit;
      fs::copy_file(data_dir + "/hf/" + config,
                    dir + "/" + repo + "/snapshots/" + commit + "/config.json");
    }
    return "HF_HUB_CACHE=" + dir;
  }();
  return env;
}

/// train's JSON answer to `args` in the fixtures' cache.
nlohmann::json json_of(const std::string& args) {
  return vramfit::cli_test::json_of("train " + args, hub_env());
}

using option_list = std::vector<std::tuple<std::string, std::string, std::string>>;

/// The file's options (option, value, key) as the JSON lists them.
option_list options_of(const nlohmann::json& from) {
  option_list list;
  for (const auto& o : from["options"]) list.emplace_back(o["option"], o["value"], o["key"]);
  return list;
}

/// The keys listed as not modeled.
std::vector<std::string> unmodeled_of(const nlohmann::json& from) {
  std::vector<std::string> keys;
  for (const auto& k : from["not_modeled"]) keys.push_back(k["key"]);
  return keys;
}

/// The file's run and the same run by hand give the same JSON, but for "from".
void check_round_trip(const std::string& from, const std::string& by_hand) {
  nlohmann::json a = json_of(from), b = json_of(by_hand);
  a.erase("from");
  CHECK(a == b);
}

/// A file written in the build tree's test directory.
std::string written(const std::string& name, const std::string& text) {
  const std::string path = "vramfit_from_hf_" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

const std::string current_trl_defaults =
    " --precision amp-bf16 --recompute full --non-reentrant --optimizer adamw-fused"
    " --loss fused-chunked";
}  // namespace

TEST_CASE("--from hf-trainer: TRL's example config, the rest TRL's and transformers 5's defaults") {
  const nlohmann::json from = json_of("--from hf-trainer " + f1)["from"];
  CHECK(options_of(from) ==
        option_list{
            {"--framework", "hf-trainer", "--from hf-trainer"},
            {"--model", "Qwen/Qwen2.5-0.5B", "model_name_or_path"},
            {"--precision", "amp-bf16", "(default: bf16 true unless fp16, TRL)"},
            {"--micro-batch", "8", "(default: per_device_train_batch_size 8)"},
            {"--seq-len", "1024", "(default: max_length 1024, TRL)"},
            {"--attention", "sdpa", "(default: attn_implementation sdpa)"},
            {"--recompute", "full", "(default: gradient_checkpointing true, TRL)"},
            {"--non-reentrant", "true",
             "(default: gradient_checkpointing_kwargs.use_reentrant false)"},
            {"--optimizer", "adamw-fused", "(default: optim adamw_torch_fused, torch >= 2.8)"},
            {"--loss", "fused-chunked", "(default: loss_type chunked_nll, TRL)"}});
  CHECK(unmodeled_of(from).empty());
  CHECK(from["no_effect"] ==
        nlohmann::json{"learning_rate", "lr_scheduler_type", "report_to", "dataset_name"});
  check_round_trip("--from hf-trainer " + f1,
                   "--framework hf-trainer --model Qwen/Qwen2.5-0.5B --micro-batch 8 --seq-len 1024"
                   " --attention sdpa" +
                       current_trl_defaults);
}

TEST_CASE("--from hf-trainer: the alignment-handbook's QLoRA recipe, TRL 0.19's names") {
  const nlohmann::json from = json_of("--from hf-trainer " + f2)["from"];
  CHECK(options_of(from) ==
        option_list{{"--framework", "hf-trainer", "--from hf-trainer"},
                    {"--model", "mistralai/Mistral-7B-v0.1", "model_name_or_path"},
                    {"--precision", "amp-bf16", "bf16"},
                    {"--grad-accum", "2", "gradient_accumulation_steps"},
                    {"--micro-batch", "4", "per_device_train_batch_size"},
                    {"--seq-len", "2048", "max_seq_length"},
                    {"--attention", "flash", "attn_implementation"},
                    {"--recompute", "full", "gradient_checkpointing"},
                    {"--non-reentrant", "true", "gradient_checkpointing_kwargs.use_reentrant"},
                    {"--lora-rank", "16", "lora_r"},
                    {"--lora-targets", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                     "lora_target_modules"},
                    {"--qlora", "true", "load_in_4bit"},
                    {"--lora-dtype", "fp32", "load_in_4bit"}});
  // Evaluation and LoRA's dropout are listed, not dropped.
  CHECK(unmodeled_of(from) ==
        std::vector<std::string>{"per_device_eval_batch_size", "lora_dropout"});
  check_round_trip("--from hf-trainer " + f2,
                   "--framework hf-trainer --model mistralai/Mistral-7B-v0.1 --qlora --lora-rank 16"
                   " --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
                   " --lora-dtype fp32 --precision amp-bf16 --micro-batch 4 --seq-len 2048"
                   " --grad-accum 2 --recompute full --non-reentrant --optimizer adamw"
                   " --loss fp32-upcast --attention flash");
}

TEST_CASE("--from hf-trainer: the alignment-handbook's full recipe, bf16 weights trained in bf16") {
  const nlohmann::json from = json_of("--from hf-trainer " + f3)["from"];
  CHECK(options_of(from) ==
        option_list{{"--framework", "hf-trainer", "--from hf-trainer"},
                    {"--model", "mistralai/Mistral-7B-v0.1", "model_name_or_path"},
                    {"--precision", "bf16", "torch_dtype"},
                    {"--grad-accum", "1", "gradient_accumulation_steps"},
                    {"--micro-batch", "16", "per_device_train_batch_size"},
                    {"--seq-len", "2048", "max_seq_length"},
                    {"--attention", "flash", "attn_implementation"},
                    {"--recompute", "full", "gradient_checkpointing"},
                    {"--non-reentrant", "true", "gradient_checkpointing_kwargs.use_reentrant"}});
  CHECK(unmodeled_of(from) == std::vector<std::string>{"per_device_eval_batch_size"});
  check_round_trip("--from hf-trainer " + f3,
                   "--framework hf-trainer --model mistralai/Mistral-7B-v0.1 --precision bf16"
                   " --micro-batch 16 --seq-len 2048 --recompute full --non-reentrant"
                   " --attention flash");
}

TEST_CASE("--from hf-trainer: TRL's LoRA example, packed padding-free into one row") {
  const nlohmann::json from = json_of("--from hf-trainer " + f6)["from"];
  CHECK(options_of(from) ==
        option_list{
            {"--framework", "hf-trainer", "--from hf-trainer"},
            {"--model", "Qwen/Qwen2-0.5B", "model_name_or_path"},
            {"--precision", "amp-bf16", "(default: bf16 true unless fp16, TRL)"},
            {"--grad-accum", "8", "gradient_accumulation_steps"},
            {"--micro-batch", "1", "packing"},
            {"--seq-len", "2048", "packing"},
            {"--attention", "flash", "(default: attn_implementation sdpa)"},
            {"--recompute", "full", "(default: gradient_checkpointing true, TRL)"},
            {"--non-reentrant", "true",
             "(default: gradient_checkpointing_kwargs.use_reentrant false)"},
            {"--optimizer", "adamw-fused", "(default: optim adamw_torch_fused, torch >= 2.8)"},
            {"--loss", "fused-chunked", "(default: loss_type chunked_nll, TRL)"},
            {"--lora-rank", "32", "lora_r"},  // no lora_target_modules: peft's, by model_type
            {"--lora-dtype", "fp32", "use_peft"}});
  CHECK(unmodeled_of(from).empty());
  check_round_trip("--from hf-trainer " + f6,
                   "--framework hf-trainer --model Qwen/Qwen2-0.5B --lora-rank 32"
                   " --lora-dtype fp32 --micro-batch 1 --seq-len 2048"
                   " --grad-accum 8 --attention flash" +
                       current_trl_defaults);
}

TEST_CASE("--from accelerate: TRL's FSDP2 and ZeRO-3 profiles") {
  const nlohmann::json fsdp = json_of("--from accelerate " + f4)["from"];
  CHECK(options_of(fsdp) ==
        option_list{{"--framework", "hf-trainer", "--from accelerate"},
                    {"--dp", "8", "num_processes"},
                    {"--fsdp-version", "2", "fsdp_config.fsdp_version"},
                    {"--fsdp", "full", "distributed_type"},
                    {"--reshard-after-forward", "true", "fsdp_config.fsdp_reshard_after_forward"},
                    {"--precision", "amp-bf16", "mixed_precision"}});
  CHECK(unmodeled_of(fsdp).empty());
  CHECK(fsdp["no_effect"].size() == 13);  // the launch's and checkpoint keys
  check_round_trip("--from accelerate " + f4,
                   "--framework hf-trainer --dp 8 --fsdp full --fsdp-version 2"
                   " --reshard-after-forward true --precision amp-bf16");

  const nlohmann::json zero = json_of("--from accelerate " + f5)["from"];
  CHECK(options_of(zero) ==
        option_list{{"--framework", "hf-trainer", "--from accelerate"},
                    {"--dp", "8", "num_processes"},
                    {"--zero", "3", "deepspeed_config.zero_stage"},
                    {"--zero-impl", "deepspeed", "distributed_type"},
                    {"--precision", "bf16-fp32-master-16bit-grads", "mixed_precision"}});
  CHECK(unmodeled_of(zero).empty());
  check_round_trip("--from accelerate " + f5,
                   "--framework hf-trainer --dp 8 --zero 3 --zero-impl deepspeed"
                   " --precision bf16-fp32-master-16bit-grads");
}

TEST_CASE("--from hf-trainer and accelerate: the command line's options win, and are listed") {
  const nlohmann::json from =
      json_of("--from hf-trainer " + f1 + " --model qwen2.5-0.5b --micro-batch 2")["from"];
  CHECK(from["overridden"] == nlohmann::json{{{"key", "model_name_or_path"},
                                              {"option", "--model Qwen/Qwen2.5-0.5B"},
                                              {"why", "the command line gives --model"}},
                                             {{"key", "(default: per_device_train_batch_size 8)"},
                                              {"option", "--micro-batch 8"},
                                              {"why", "the command line gives --micro-batch"}}});
  check_round_trip("--from hf-trainer " + f1 + " --model qwen2.5-0.5b --micro-batch 2",
                   "--framework hf-trainer --model qwen2.5-0.5b --micro-batch 2 --seq-len 1024"
                   " --attention sdpa" +
                       current_trl_defaults);
  const nlohmann::json acc = json_of("--from accelerate " + f4 + " --dp 4")["from"];
  REQUIRE(acc["overridden"].size() == 1);
  CHECK(acc["overridden"][0]["option"] == "--dp 8");
}

TEST_CASE(
    "--from hf-trainer: fsdp, optim, dtype and a DeepSpeed file, as transformers reads them") {
  const auto options = [](const std::string& text) {
    return options_of(json_of("--from hf-trainer " + written("map.yaml", text))["from"]);
  };
  // A plain TrainingArguments file: no TRL defaults; fsdp words with offload, FSDP2.
  CHECK(options("fsdp: full_shard auto_wrap offload\nbf16: true\noptim: paged_adamw_8bit\n") ==
        option_list{{"--framework", "hf-trainer", "--from hf-trainer"},
                    {"--fsdp-version", "2", "(default: fsdp_config.version 2, transformers 5)"},
                    {"--fsdp", "full", "fsdp"},
                    {"--reshard-after-forward", "true", "fsdp"},
                    {"--offload", "all", "fsdp"},
                    {"--precision", "amp-bf16", "bf16"},
                    {"--micro-batch", "8", "(default: per_device_train_batch_size 8)"},
                    {"--optimizer", "paged-adamw-8bit", "optim"}});
  // shard_grad_op under FSDP2: no resharding after forward; FSDP1 keeps the strategy.
  CHECK(options("fsdp: [shard_grad_op]\nfsdp_config: {fsdp_version: 1}\noptim: adafactor\n"
                "per_device_train_batch_size: 2\n") ==
        option_list{
            {"--framework", "hf-trainer", "--from hf-trainer"},
            {"--fsdp-version", "1", "fsdp_config.fsdp_version"},
            {"--fsdp", "grad-op", "fsdp"},
            {"--backward-prefetch", "none", "(default: fsdp_config.backward_prefetch NO_PREFETCH)"},
            {"--precision", "fp32", "(default: bf16 false, fp16 false)"},
            {"--micro-batch", "2", "per_device_train_batch_size"},
            {"--optimizer", "adafactor", "optim"}});
  // An optimizer vramfit does not model, and a DeepSpeed file: listed, with what to run.
  const nlohmann::json from = json_of(
      "--from hf-trainer " + written("ds.yaml",
                                     "deepspeed: ds_z3.json\nbf16: true\noptim: adamw_torch_4bit\n"
                                     "torch_compile: true\n"))["from"];
  CHECK(unmodeled_of(from) == std::vector<std::string>{"deepspeed", "optim", "torch_compile"});
  CHECK(from["not_modeled"][0]["why"].get<std::string>().find(
            "run vramfit train --from deepspeed 'ds_z3.json' with the options above") !=
        std::string::npos);
  CHECK(std::get<1>(options_of(from)[1]) == "bf16-fp32-master-16bit-grads");
}

TEST_CASE(
    "--from hf-trainer and accelerate: FSDP1's backward_prefetch, forward_prefetch and "
    "limit_all_gathers") {
  const auto from = [](const std::string& kind, const std::string& text,
                       const std::string& more = "") {
    return json_of("--from " + kind + " " + written("gather.yaml", text) + more)["from"];
  };
  const auto fsdp1_options = [](const nlohmann::json& f) {  // --fsdp and the three
    option_list kept;
    for (const auto& o : options_of(f))
      for (const char* name :
           {"--fsdp", "--backward-prefetch", "--forward-prefetch", "--limit-all-gathers"})
        if (std::get<0>(o) == name) kept.push_back(o);
    return kept;
  };
  // transformers: each key as accelerate's plugin reads it, with or without the fsdp_ prefix;
  // backward_prefetch is NO_PREFETCH when absent (training_args.py _process_fsdp_args).
  const std::string fsdp1 = "fsdp: full_shard\nfsdp_config:\n  version: 1\n";
  CHECK(fsdp1_options(from("hf-trainer", fsdp1)) ==
        option_list{{"--fsdp", "full", "fsdp"},
                    {"--backward-prefetch", "none",
                     "(default: fsdp_config.backward_prefetch NO_PREFETCH)"}});
  const std::string given = fsdp1 +
                            "  backward_prefetch: backward_pre\n  forward_prefetch: true\n"
                            "  limit_all_gathers: false\n";
  CHECK(fsdp1_options(from("hf-trainer", given)) ==
        option_list{{"--fsdp", "full", "fsdp"},
                    {"--backward-prefetch", "pre", "fsdp_config.backward_prefetch"},
                    {"--forward-prefetch", "true", "fsdp_config.forward_prefetch"},
                    {"--limit-all-gathers", "false", "fsdp_config.limit_all_gathers"}});
  check_round_trip("--from hf-trainer " + written("given.yaml", given) + " --dp 4",
                   "--framework hf-trainer --dp 4 --fsdp full --fsdp-version 1"
                   " --backward-prefetch pre --forward-prefetch --limit-all-gathers false"
                   " --precision fp32 --micro-batch 8 --optimizer adamw-fused");
  CHECK(fsdp1_options(from("hf-trainer",
                           "fsdp: [hybrid_shard]\nfsdp_config: {fsdp_version: 1, "
                           "fsdp_backward_prefetch: BACKWARD_POST, fsdp_forward_prefetch: 'True', "
                           "fsdp_limit_all_gathers: 'true'}\n",
                           " --dp 4 --fsdp-group 2")) ==
        option_list{{"--fsdp", "hybrid", "fsdp"},
                    {"--backward-prefetch", "post", "fsdp_config.fsdp_backward_prefetch"},
                    {"--forward-prefetch", "true", "fsdp_config.fsdp_forward_prefetch"}});
  CHECK(std::get<1>(fsdp1_options(from("hf-trainer", fsdp1 + "  backward_prefetch: '1'\n"))[1]) ==
        "pre");  // BackwardPrefetch(1)
  // NO_SHARD all-gathers nothing; FSDP2 (transformers 5's default) is not given them.
  const nlohmann::json no_shard =
      from("hf-trainer",
           "fsdp: no_shard\nfsdp_config: {version: 1, backward_prefetch: "
           "backward_post, limit_all_gathers: false}\n");
  CHECK(fsdp1_options(no_shard) == option_list{{"--fsdp", "none", "fsdp"}});
  CHECK(no_shard["no_effect"] ==
        nlohmann::json{"fsdp_config.backward_prefetch", "fsdp_config.limit_all_gathers"});
  const nlohmann::json fsdp2 =
      from("hf-trainer",
           "fsdp: full_shard\nfsdp_config: {backward_prefetch: backward_pre, "
           "forward_prefetch: true, limit_all_gathers: false}\n");
  CHECK(unmodeled_of(fsdp2) == std::vector<std::string>{"fsdp_config.backward_prefetch",
                                                        "fsdp_config.forward_prefetch",
                                                        "fsdp_config.limit_all_gathers"});
  CHECK(fsdp2["not_modeled"][0]["why"].get<std::string>().find("FSDP2 ignores it") !=
        std::string::npos);
  // transformers 4.x (torch_dtype: TRL <= 0.26) set limit_all_gathers as written: FSDP tests the
  // text "false" for truth, which is true.
  const std::string legacy = "torch_dtype: bfloat16\nfsdp: full_shard\nfsdp_config:\n";
  const auto has_limit = [](const nlohmann::json& f) {
    for (const auto& o : options_of(f))
      if (std::get<0>(o) == "--limit-all-gathers") return true;
    return false;
  };
  CHECK_FALSE(has_limit(from("hf-trainer", legacy + "  limit_all_gathers: 'false'\n")));
  CHECK(has_limit(from("hf-trainer", legacy + "  limit_all_gathers: false\n")));
  CHECK(has_limit(from("hf-trainer", fsdp1 + "  limit_all_gathers: 'false'\n")));

  // accelerate: launch sets FSDP_BACKWARD_PREFETCH only when given (the plugin's None otherwise);
  // it passes limit_all_gathers on to nothing.
  const std::string acc = "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n";
  CHECK(fsdp1_options(from("accelerate", acc + "  fsdp_version: 1\n")) ==
        option_list{{"--fsdp", "full", "(default: fsdp_config.fsdp_sharding_strategy FULL_SHARD)"},
                    {"--backward-prefetch", "none",
                     "(default: fsdp_config.fsdp_backward_prefetch NO_PREFETCH)"}});
  const std::string acc_given = acc +
                                "  fsdp_sharding_strategy: SHARD_GRAD_OP\n"
                                "  fsdp_backward_prefetch: BACKWARD_PRE\n"
                                "  fsdp_forward_prefetch: true\n"
                                "  fsdp_limit_all_gathers: false\n";
  const nlohmann::json a = from("accelerate", acc_given);
  CHECK(options_of(a) ==
        option_list{{"--framework", "hf-trainer", "--from accelerate"},
                    {"--dp", "8", "num_processes"},
                    {"--fsdp-version", "1", "(default: fsdp_config.fsdp_version 1)"},
                    {"--fsdp", "grad-op", "fsdp_config.fsdp_sharding_strategy"},
                    {"--backward-prefetch", "pre", "fsdp_config.fsdp_backward_prefetch"},
                    {"--forward-prefetch", "true", "fsdp_config.fsdp_forward_prefetch"},
                    {"--precision", "fp32", "(default: mixed_precision no)"}});
  CHECK(unmodeled_of(a) == std::vector<std::string>{"fsdp_config.fsdp_limit_all_gathers"});
  check_round_trip("--from accelerate " + written("acc.yaml", acc_given),
                   "--framework hf-trainer --dp 8 --fsdp grad-op --fsdp-version 1"
                   " --backward-prefetch pre --forward-prefetch --precision fp32");
  CHECK(std::get<1>(options_of(from("accelerate", acc + "  fsdp_backward_prefetch: 2\n"))[4]) ==
        "post");  // launch passes str(2) on: BackwardPrefetch(2)
  // accelerate < 1.0's name: ignored since 1.0, so the default holds.
  const nlohmann::json old = from("accelerate", acc +
                                                    "  fsdp_backward_prefetch_policy: "
                                                    "BACKWARD_PRE\n");
  CHECK(std::get<1>(options_of(old)[4]) == "none");
  CHECK(unmodeled_of(old) == std::vector<std::string>{"fsdp_config.fsdp_backward_prefetch_policy"});
  // FSDP2: the plugin warns and sets backward_prefetch to None, and reads FSDP_FORWARD_PREFETCH
  // with FSDP1 only.
  const nlohmann::json acc2 =
      from("accelerate", acc +
                             "  fsdp_version: 2\n  fsdp_backward_prefetch: BACKWARD_PRE\n"
                             "  fsdp_forward_prefetch: true\n");
  CHECK(unmodeled_of(acc2) == std::vector<std::string>{"fsdp_config.fsdp_forward_prefetch",
                                                       "fsdp_config.fsdp_backward_prefetch"});
  for (const auto& o : options_of(acc2)) {
    CHECK(std::get<0>(o) != "--backward-prefetch");
    CHECK(std::get<0>(o) != "--forward-prefetch");
  }
  // plan searches FSDP1 with torch's defaults: the file's are listed, not taken.
  const nlohmann::json plan = vramfit::cli_test::json_of(
      "plan --gpus 8 --from accelerate " + written("plan.yaml", acc_given), hub_env())["from"];
  REQUIRE(plan["overridden"].size() == 3);  // --dp, --backward-prefetch, --forward-prefetch
  CHECK(plan["overridden"][1]["option"] == "--backward-prefetch pre");
  CHECK(plan["overridden"][2]["why"].get<std::string>().find("plan searches FSDP1 with its "
                                                             "defaults") != std::string::npos);
  // FSDP2's reshard_after_forward likewise: plan searches resharding FSDP.
  const nlohmann::json plan2 =
      vramfit::cli_test::json_of("plan --gpus 8 --from accelerate " + f4, hub_env())["from"];
  REQUIRE(plan2["overridden"].size() == 2);  // --dp, --reshard-after-forward
  CHECK(plan2["overridden"][1]["option"] == "--reshard-after-forward true");
}

TEST_CASE("--from hf-trainer and accelerate: bad files refused in one line, naming file and key") {
  const auto refused = [](const std::string& kind, const std::string& text,
                          const std::string& part) {
    const std::string path = written("bad.yaml", text);
    const result r = run("train --from " + kind + " " + path);
    INFO(text);
    check_refusal(r, part);
    CHECK(r.err.find("--from " + kind + " '" + path + "'") != std::string::npos);
  };
  refused("hf-trainer", "per_device_train_batch_size: '4'\n",
          "per_device_train_batch_size must be an integer from 1");
  refused("hf-trainer", "optim: adamw_foo\n", "optim 'adamw_foo' is not a valid OptimizerNames");
  refused("hf-trainer", "bf16: true\nfp16: true\n", "bf16 and fp16 are both true");
  refused("hf-trainer", "fsdp: offload\n", "fsdp offload can't work on its own");
  refused("hf-trainer",
          "fsdp: full_shard\nfsdp_config: {activation_checkpointing: true}\n"
          "max_length: 512\n",
          "fsdp_config.activation_checkpointing and gradient_checkpointing can't be set to True");
  refused("hf-trainer", "fsdp: hybrid_shard\n", "fsdp no_shard and hybrid_shard are only");
  refused("hf-trainer",
          "fsdp: full_shard\nfsdp_config: {version: 1, backward_prefetch: sideways}\n",
          "fsdp_config.backward_prefetch must be BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH, got "
          "\"sideways\"");
  refused("hf-trainer", "fsdp: full_shard\nfsdp_config: {version: 1, forward_prefetch: maybe}\n",
          "fsdp_config.forward_prefetch must be true or false, got \"maybe\"");
  refused("hf-trainer", "load_in_4bit: true\n", "load_in_4bit without use_peft");
  refused("hf-trainer", "dtype: bf16\n", "dtype must be 'auto' or a torch.dtype");
  refused("hf-trainer", "packing: true\npacking_strategy: ffd\n", "packing_strategy must be");
  refused("hf-trainer", slurp(f4), "distributed_type is accelerate's: this is an accelerate");
  refused("hf-trainer",
          slurp(data_dir + "/from/deepspeed/hf-transformers_tests-deepspeed_ds_config_zero2.json"),
          "is DeepSpeed's: this is a DeepSpeed config");
  refused("accelerate", slurp(f1), "distributed_type must be specified");
  refused("accelerate", "distributed_type: XLA\n", "distributed_type 'XLA' is not a CUDA GPU run");
  refused("accelerate",
          "distributed_type: FSDP\nfsdp_config: {fsdp_version: 2, "
          "fsdp_reshard_after_forward: FULL_SHARD}\n",
          "this is not supported with FSDP2, please set to a bool");
  // The plugin reads the value whatever the version: FSDP2 too (BackwardPrefetch["SIDEWAYS"]).
  for (const std::string version : {"1", "2"})
    refused("accelerate",
            "distributed_type: FSDP\nfsdp_config: {fsdp_version: " + version +
                ", fsdp_backward_prefetch: sideways}\n",
            "fsdp_config.fsdp_backward_prefetch must be BACKWARD_PRE, BACKWARD_POST or "
            "NO_PREFETCH, got \"sideways\"");
  refused("accelerate",
          "distributed_type: DEEPSPEED\ndeepspeed_config: {deepspeed_config_file: "
          "ds.json, zero_stage: 3}\n",
          "deepspeed_config.zero_stage is ignored when using deepspeed_config_file");
  refused("accelerate",
          "distributed_type: FSDP\nnum_processes: 8\nparallelism_config: "
          "{parallelism_config_tp_size: 2, parallelism_config_dp_shard_size: 2}\n",
          "num_processes does not match ParallelismConfig total_size 4");
  refused("accelerate", "distributed_type: MULTI_GPU\nuse_cpu: true\n", "use_cpu is true");
  // The file itself: missing, empty, nested too deep, not UTF-8.
  for (const std::string kind : {"hf-trainer", "accelerate"}) {
    check_refusal(run("train --from " + kind + " no-such-file.yaml"), "no-such-file.yaml");
    refused(kind, "", "must hold an object of keys");
    refused(kind, std::string(100, '[') + std::string(100, ']'), "nests deeper than");
    const std::string utf16 = written("utf16.yaml", std::string("\xFF\xFEo\0p\0", 6));
    check_refusal(run("train --from " + kind + " " + utf16), "is not UTF-8");
  }
}
