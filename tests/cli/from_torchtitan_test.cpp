// CLI tier: --from torchtitan job.toml, torchtitan's TOML job file as vramfit's options
// (examples/cli/from_torchtitan.hpp), on re-created copies of torchtitan v0.2.2's shipped files
// (tests/data/from/torchtitan) and on small files written here.
#include <doctest/doctest.h>

#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_support.hpp"

namespace {

using vramfit::cli_test::check_refusal, vramfit::cli_test::data_dir, vramfit::cli_test::result,
    vramfit::cli_test::run;
using triple = std::array<std::string, 3>;  // option, value, key

const std::string dir = data_dir + "/from/torchtitan/";
// DeepSeek-V2-Lite's config.json (flavor "16B"), laid out as huggingface_hub caches it.
const std::string hub = "HF_HUB_CACHE=" + dir + "hf-cache";
const std::string mp_default = "(default: training.mixed_precision_param bfloat16)";
const std::string launcher = "(default: run_train.sh PYTORCH_ALLOC_CONF)";
const std::string shard = "parallelism.data_parallel_shard_degree";

nlohmann::json json_of(const std::string& args, const std::string& env = "") {
  const result r = run(args + " -f json", env);
  const std::string what = args + ": " + r.err;
  INFO(what);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.out);
}

std::vector<triple> options_of(const nlohmann::json& j) {
  std::vector<triple> list;
  for (const auto& o : j.at("from").at("options"))
    list.push_back({o.at("option"), o.at("value"), o.at("key")});
  return list;
}

std::set<std::string> keys_of(const nlohmann::json& j, const char* list) {
  std::set<std::string> keys;
  for (const auto& k : j.at("from").at(list)) keys.insert(k.at("key").get<std::string>());
  return keys;
}

/// The same answer with the file and with the flags it stands for.
void check_round_trip(const std::string& from, const std::string& flags,
                      const std::string& env = "") {
  nlohmann::json a = json_of(from, env);
  a.erase("from");
  CHECK(a == json_of(flags, env));
}

/// A job file written here, in the test directory.
std::string written(const std::string& name, const std::string& text) {
  std::ofstream(name, std::ios::binary) << text;
  return name;
}

const std::string tiny_head = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n";

}  // namespace

TEST_CASE("--from torchtitan llama3_8b.toml: FSDP2 over the GPUs left, op-SAC") {
  const std::string from =
      "train --from torchtitan " + dir + "llama3_8b.toml --dp 64 --gpu a100-80gb";
  const nlohmann::json j = json_of(from);
  CHECK(options_of(j) ==
        std::vector<triple>{{"--framework", "torchtitan", "--from torchtitan"},
                            {"--model", "llama-3-8b", "model.flavor"},
                            {"--seq-len", "8192", "training.seq_len"},
                            {"--fsdp", "full", shard},
                            {"--fsdp-version", "2", shard},
                            {"--micro-batch", "1", "training.local_batch_size"},
                            {"--precision", "amp-bf16", mp_default},
                            {"--recompute", "op-sac", "activation_checkpoint.selective_ac_option"},
                            {"--optimizer", "adamw", "optimizer.name"},
                            {"--expandable-segments", "true", launcher}});
  // -1: the GPUs left, which the file does not hold.
  CHECK(keys_of(j, "not_modeled") == std::set<std::string>{shard});
  CHECK(j.at("from").at("not_modeled")[0].at("why").get<std::string>().find("give --dp") !=
        std::string::npos);
  check_round_trip(from,
                   "train --framework torchtitan --model llama-3-8b --seq-len 8192 --fsdp full "
                   "--fsdp-version 2 --micro-batch 1 --precision amp-bf16 --recompute op-sac "
                   "--optimizer adamw --expandable-segments --dp 64 --gpu a100-80gb");
}

TEST_CASE("--from torchtitan llama3_70b.toml: TP 8 with sequence parallelism, full recompute") {
  const std::string from =
      "train --from torchtitan " + dir + "llama3_70b.toml --dp 8 --gpu a100-80gb";
  const nlohmann::json j = json_of(from);
  CHECK(options_of(j) == std::vector<triple>{{"--framework", "torchtitan", "--from torchtitan"},
                                             {"--model", "llama-3-70b", "model.flavor"},
                                             {"--seq-len", "8192", "training.seq_len"},
                                             {"--fsdp", "full", shard},
                                             {"--fsdp-version", "2", shard},
                                             {"--tp", "8", "parallelism.tensor_parallel_degree"},
                                             {"--sp", "true", "parallelism.tensor_parallel_degree"},
                                             {"--micro-batch", "8", "training.local_batch_size"},
                                             {"--precision", "amp-bf16", mp_default},
                                             {"--recompute", "full", "activation_checkpoint.mode"},
                                             {"--optimizer", "adamw", "optimizer.name"},
                                             {"--expandable-segments", "true", launcher}});
  CHECK(keys_of(j, "not_modeled") == std::set<std::string>{shard});
  check_round_trip(from,
                   "train --framework torchtitan --model llama-3-70b --seq-len 8192 --fsdp full "
                   "--fsdp-version 2 --tp 8 --sp --micro-batch 8 --precision amp-bf16 "
                   "--recompute full --optimizer adamw --expandable-segments --dp 8 "
                   "--gpu a100-80gb");
}

TEST_CASE("--from torchtitan llama3_405b.toml: float8, compile and async TP listed") {
  const std::string from = "train --from torchtitan " + dir + "llama3_405b.toml --dp 16";
  const nlohmann::json j = json_of(from);
  CHECK(options_of(j) == std::vector<triple>{{"--framework", "torchtitan", "--from torchtitan"},
                                             {"--model", "llama-3.1-405b", "model.flavor"},
                                             {"--seq-len", "8192", "training.seq_len"},
                                             {"--fsdp", "full", shard},
                                             {"--fsdp-version", "2", shard},
                                             {"--tp", "8", "parallelism.tensor_parallel_degree"},
                                             {"--sp", "true", "parallelism.tensor_parallel_degree"},
                                             {"--tp-comm-overlap", "async-tp",
                                              "parallelism.enable_async_tensor_parallel"},
                                             {"--micro-batch", "2", "training.local_batch_size"},
                                             {"--precision", "amp-bf16", mp_default},
                                             {"--recompute", "full", "activation_checkpoint.mode"},
                                             {"--optimizer", "adamw", "optimizer.name"},
                                             {"--expandable-segments", "true", launcher}});
  CHECK(keys_of(j, "not_modeled") == std::set<std::string>{"model.converters",
                                                           "quantize.linear.float8",
                                                           "compile.enable", shard});
  check_round_trip(from,
                   "train --framework torchtitan --model llama-3.1-405b --seq-len 8192 --fsdp "
                   "full --fsdp-version 2 --tp 8 --sp --tp-comm-overlap async-tp --micro-batch 2 "
                   "--precision amp-bf16 "
                   "--recompute full --optimizer adamw --expandable-segments --dp 16");
}

TEST_CASE("--from torchtitan deepseek_v3_16b.toml: DeepSeek-V2-Lite's shape with EP 8") {
  const std::string from = "train --from torchtitan " + dir + "deepseek_v3_16b.toml --dp 8";
  const nlohmann::json j = json_of(from, hub);
  CHECK(options_of(j) ==
        std::vector<triple>{{"--framework", "torchtitan", "--from torchtitan"},
                            {"--model", "deepseek-ai/DeepSeek-V2-Lite", "model.flavor"},
                            {"--seq-len", "4096", "training.seq_len"},
                            {"--fsdp", "full", shard},
                            {"--fsdp-version", "2", shard},
                            {"--ep", "8", "parallelism.expert_parallel_degree"},
                            {"--micro-batch", "4", "training.local_batch_size"},
                            {"--precision", "amp-bf16", mp_default},
                            {"--recompute", "op-sac", "activation_checkpoint.selective_ac_option"},
                            {"--optimizer", "adamw", "optimizer.name"},
                            {"--expandable-segments", "true", launcher}});
  CHECK(keys_of(j, "not_modeled") == std::set<std::string>{"compile.enable", shard});
  CHECK(j.at("model").at("parameters") == 15'706'484'224);
  check_round_trip(from,
                   "train --framework torchtitan --model deepseek-ai/DeepSeek-V2-Lite --seq-len "
                   "4096 --fsdp full --fsdp-version 2 --ep 8 --micro-batch 4 --precision "
                   "amp-bf16 --recompute op-sac --optimizer adamw --expandable-segments --dp 8",
                   hub);
}

TEST_CASE("--from torchtitan llama4_17bx128e.toml: Llama 4 refused in one line") {
  check_refusal(run("train --from torchtitan " + dir + "llama4_17bx128e.toml"),
                "llama4_17bx128e.toml': model.name llama4 (Llama 4, flavor '17bx128e') is not a "
                "model vramfit can read");
}

TEST_CASE("--from torchtitan: the layout torchtitan derives from the degrees") {
  SUBCASE("a pipeline: torchtitan's split, 1F1B, micro-batches of the microbatch size") {
    const std::string file = written("tt_pp.toml", tiny_head +
                                                       "[training]\nlocal_batch_size = 8\n"
                                                       "[parallelism]\ndata_parallel_shard_degree "
                                                       "= 2\npipeline_parallel_degree = 4\n"
                                                       "pipeline_parallel_microbatch_size = 2\n");
    const std::string from = "train --from torchtitan " + file;
    const nlohmann::json j = json_of(from);
    const std::vector<triple> o = options_of(j);
    CHECK(o ==
          std::vector<triple>{
              {"--framework", "torchtitan", "--from torchtitan"},
              {"--model", "llama-3-8b", "model.flavor"},
              {"--dp", "2", shard},
              {"--fsdp", "full", shard},
              {"--fsdp-version", "2", shard},
              {"--reshard-after-forward", "false",
               "(default: parallelism.fsdp_reshard_after_forward default)"},
              {"--pp", "4", "parallelism.pipeline_parallel_degree"},
              {"--micro-batch", "2", "parallelism.pipeline_parallel_microbatch_size"},
              {"--grad-accum", "4", "training.local_batch_size"},
              {"--pp-stages", "8,9,8,7", "parallelism.pipeline_parallel_degree"},
              {"--precision", "amp-bf16", mp_default},
              {"--recompute", "full", "(default: activation_checkpoint.selective_ac_option 2)"},
              {"--recompute-every", "2", "(default: activation_checkpoint.selective_ac_option 2)"},
              {"--expandable-segments", "true", launcher}});
    check_round_trip(from,
                     "train --framework torchtitan --model llama-3-8b --dp 2 --fsdp full "
                     "--fsdp-version 2 --reshard-after-forward false --pp 4 "
                     "--micro-batch 2 --grad-accum 4 --pp-stages 8,9,8,7 --precision amp-bf16 "
                     "--recompute full --recompute-every 2 --expandable-segments");
  }
  SUBCASE("Interleaved1F1B: two stages per rank, summed per rank") {
    const std::string file = written(
        "tt_interleaved.toml",
        "[model]\nname = \"llama3\"\nflavor = \"405B\"\n[parallelism]\n"
        "data_parallel_shard_degree = 1\ntensor_parallel_degree = 8\npipeline_parallel_degree = "
        "8\npipeline_parallel_schedule = \"interleaved1f1b\"\n");
    const std::vector<triple> o = options_of(json_of("train --from torchtitan " + file));
    // 16 stages of 128 effective layers: 8 each, less the embedding's and the head's.
    CHECK(o.at(9) == triple{"--virtual-stages", "2", "parallelism.pipeline_parallel_schedule"});
    CHECK(o.at(10) ==
          triple{"--pp-stages", "15,16,16,16,16,16,16,15", "parallelism.pipeline_parallel_degree"});
    // No FSDP (shard 1) with TP and PP: maybe_enable_amp turns mixed precision off.
    CHECK(o.at(11) == triple{"--precision", "fp32", "parallelism.tensor_parallel_degree"});
  }
  SUBCASE("HSDP and DDP") {
    const std::string hsdp = written("tt_hsdp.toml", tiny_head +
                                                         "[parallelism]\n"
                                                         "data_parallel_replicate_degree = 2\n"
                                                         "data_parallel_shard_degree = 4\n");
    const std::vector<triple> o = options_of(json_of("train --from torchtitan " + hsdp));
    CHECK(o.at(2) == triple{"--dp", "8", shard});
    CHECK(o.at(3) == triple{"--fsdp", "hybrid", "parallelism.data_parallel_replicate_degree"});
    CHECK(o.at(4) == triple{"--fsdp-group", "4", shard});
    const std::string ddp = written("tt_ddp.toml", tiny_head +
                                                       "[parallelism]\n"
                                                       "data_parallel_replicate_degree = 4\n"
                                                       "data_parallel_shard_degree = 1\n");
    const std::vector<triple> d = options_of(json_of("train --from torchtitan " + ddp));
    CHECK(d.at(2) == triple{"--dp", "4", shard});
    CHECK(d.at(3).at(0) == "--micro-batch");  // no --fsdp: replicate() is DDP
  }
  SUBCASE("defaults torchtitan fills in, and the accumulation") {
    const std::string file = written("tt_defaults.toml", tiny_head +
                                                             "[training]\nglobal_batch_size = 64\n"
                                                             "[parallelism]\n"
                                                             "data_parallel_shard_degree = 4\n"
                                                             "[activation_checkpoint]\n"
                                                             "mode = \"selective\"\n"
                                                             "selective_ac_option = \"0\"\n");
    const std::vector<triple> o = options_of(json_of("train --from torchtitan " + file));
    CHECK(o.at(5) == triple{"--micro-batch", "8", "(default: training.local_batch_size 8)"});
    CHECK(o.at(6) == triple{"--grad-accum", "2", "training.global_batch_size"});
    CHECK(o.at(8) == triple{"--recompute", "full", "activation_checkpoint.selective_ac_option"});
    CHECK(o.at(9).at(0) == "--expandable-segments");  // "0": every block, no --recompute-every
  }
}

TEST_CASE("--from torchtitan: the command line overrides the file") {
  const std::string from =
      "train --from torchtitan " + dir + "llama3_8b.toml --dp 8 --micro-batch 2 --recompute none";
  const nlohmann::json j = json_of(from);
  const auto& overridden = j.at("from").at("overridden");
  REQUIRE(overridden.size() == 2);
  CHECK(overridden[0].at("key") == "training.local_batch_size");
  CHECK(overridden[0].at("option") == "--micro-batch 1");
  CHECK(overridden[1].at("option") == "--recompute op-sac");
  check_round_trip(from,
                   "train --framework torchtitan --model llama-3-8b --seq-len 8192 --fsdp full "
                   "--fsdp-version 2 --micro-batch 2 --precision amp-bf16 --recompute none "
                   "--optimizer adamw --expandable-segments --dp 8");
  // A flavor without a preset leaves --model to the user, and lists why.
  const std::string debug = written("tt_debug.toml", "[model]\nflavor = \"debugmodel\"\n");
  const nlohmann::json d = json_of("train --from torchtitan " + debug + " --model gpt2");
  CHECK(keys_of(d, "not_modeled") == std::set<std::string>{"model.flavor"});
  CHECK(d.at("model").at("name") == "GPT-2 (124M)");
}

TEST_CASE("--from torchtitan: bad files are refused in one line naming the file and the key") {
  const auto refused = [](const std::string& name, const std::string& text,
                          const std::string& part) {
    const std::string what = name + ": " + text;
    INFO(what);
    const result r = run("train --from torchtitan " + written(name, text));
    check_refusal(r, "--from torchtitan '" + name + "'");
    CHECK(r.err.find(part) != std::string::npos);
  };
  refused("tt_type.toml", "[training]\nlocal_batch_size = \"4\"\n",
          "training.local_batch_size must be an integer from 1");
  refused("tt_bool.toml", "[compile]\nenable = \"false\"\n",
          "compile.enable must be true or false");
  refused("tt_list.toml", "[model]\nconverters = \"float8\"\n",
          "model.converters must be an array of text");
  refused("tt_ac_int.toml", "[activation_checkpoint]\nselective_ac_option = 2\n",
          "activation_checkpoint.selective_ac_option must be text");
  refused("tt_mode.toml", "[activation_checkpoint]\nmode = \"sometimes\"\n",
          "activation_checkpoint.mode \"sometimes\": \"Invalid AC mode\"");
  refused("tt_shard0.toml", "[parallelism]\ndata_parallel_shard_degree = 0\n",
          "parallelism.data_parallel_shard_degree must be -1 or >= 1");
  refused("tt_optim.toml", "[optimizer]\nname = \"Lion\"\n", "optimizer.name \"Lion\"");
  refused("tt_ddp_tp.toml",
          "[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 1\n"
          "tensor_parallel_degree = 2\n",
          "parallelism.data_parallel_replicate_degree > 1 without sharding is DDP");
  refused("tt_global.toml",
          "[training]\nlocal_batch_size = 2\nglobal_batch_size = 10\n[parallelism]\n"
          "data_parallel_shard_degree = 4\n",
          "training.global_batch_size \"global batch size must be multiple");
  refused("tt_seq.toml", "[training]\nseq_len = 1000\n[parallelism]\ntensor_parallel_degree = 16\n",
          "training.seq_len 1000 must be divisible");
  refused("tt_async.toml",
          "[parallelism]\ntensor_parallel_degree = 2\n"
          "enable_async_tensor_parallel = true\n",
          "parallelism.enable_async_tensor_parallel needs a compiled model");
  refused("tt_schedule.toml",
          "[parallelism]\npipeline_parallel_degree = 2\n"
          "pipeline_parallel_schedule = \"ZBVZeroBubble\"\n",
          "parallelism.pipeline_parallel_schedule \"ZBVZeroBubble\" is not modeled");
  refused("tt_converter.toml", "[model]\nconverters = [\"fp8\"]\n",
          "model.converters names no registered converter");
  refused("tt_section.toml", "[model]\nname = \"llama3\"\n[float8]\nemulate = true\n",
          "float8 is not a section of torchtitan's JobConfig");
  refused("tt_empty.toml", "", "holds no section of torchtitan's JobConfig");
  refused("tt_nested.toml", "a = " + std::string(100, '[') + std::string(100, ']') + "\n",
          "nests deeper than 64 levels");
  refused("tt_utf16.toml", std::string("\xFF\xFE[\0m\0o\0d\0e\0l\0]\0", 16), "is not UTF-8");
  // Another kind's file: DeepSpeed's JSON is not TOML.
  check_refusal(run("train --from torchtitan " + data_dir +
                    "/from/deepspeed/hf-transformers_tests-deepspeed_ds_config_zero2.json"),
                "is not valid TOML");
  check_refusal(run("train --from torchtitan tt_missing.toml"), "'tt_missing.toml' does not exist");
}

TEST_CASE("--from torchtitan: what toml++ 3.3 trips on is refused in one line (fuzz_launcher)") {
  // A table header that opens on '#', and a byte past ASCII in a bare key: TOML 1.0 allows the
  // latter in strings and comments only, which stay readable.
  const std::pair<const char*, const char*> bad[] = {
      {"[# a comment as a table]\n", "expected bare key starting character"},
      {"[job]\nk\xEF\xB3\xBFy = 1\n",
       "line 2: a character past ASCII outside a string or comment"}};
  for (const auto& [text, part] : bad) {
    std::ofstream("tt_fuzzed.toml", std::ios::binary) << text;
    check_refusal(run("train --from torchtitan tt_fuzzed.toml"), part);
  }
  std::ofstream("tt_unicode.toml", std::ios::binary)
      << "# caf\xC3\xA9\n[job]\ndescription = \"caf\xC3\xA9 \\\" '''\" # \xC3\xA9\n"
         "[training]\nseq_len = 2048\n";
  const result fine = run("train --from torchtitan tt_unicode.toml --dp 8 -f json");
  CHECK(fine.status == 0);
  CHECK(fine.err.empty());
}
