// CLI tier: --from, on DeepSpeed's JSON. The options each re-created example config expands to,
// read by hand from the file against DeepSpeed's parser (docs/from.md#--from-deepspeed); round
// trips against the same options typed; the command line over the file; and bad files.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_support.hpp"

namespace {
using namespace vramfit::cli_test;
using words = std::vector<std::string>;

const std::string ds = data_dir + "/from/deepspeed/";
const std::string hf_zero3 = ds + "hf-transformers_tests-deepspeed_ds_config_zero3.json";
const std::string hf_zero2 = ds + "hf-transformers_tests-deepspeed_ds_config_zero2.json";

/// A file written in the test directory.
std::string written(const std::string& name, const std::string& text) {
  std::ofstream(name, std::ios::binary) << text;
  return name;
}
}  // namespace

TEST_CASE("--from deepspeed: Hugging Face's ZeRO-3 example, its auto values and round trip") {
  const nlohmann::json j = json_of("train -m llama-3-8b --dp 2 --from deepspeed " + hf_zero3);
  // stage 3; offload_optimizer and offload_param on cpu; sub_group_size 1e14; the two buckets
  // and the persistence threshold "auto"; the coordinator's limits 1e9; AdamW without
  // torch_adam is FusedAdam.
  CHECK(from_options(j) ==
        words{"--framework deepspeed", "--zero 3", "--reduce-bucket auto", "--prefetch-bucket auto",
              "--sub-group 100000000000000", "--max-live-parameters 1000000000",
              "--max-reuse-distance 1000000000", "--persistence-threshold auto", "--offload all",
              "--offload-to cpu", "--optimizer adamw", "--optimizer-impl fused"});
  CHECK(without_from("train -m llama-3-8b --dp 2 --from deepspeed " + hf_zero3) ==
        without_from("train -m llama-3-8b --dp 2 --framework deepspeed --zero 3 --reduce-bucket "
                     "auto --prefetch-bucket auto --sub-group 1e14 --max-live-parameters 1e9 "
                     "--max-reuse-distance 1e9 --persistence-threshold auto --offload all "
                     "--offload-to cpu --optimizer adamw --optimizer-impl fused"));
  // The Trainer fills these in; vramfit says so rather than guessing.
  for (const char* key : {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                          "train_batch_size", "fp16.enabled"}) {
    INFO(key);
    CHECK(lists(j, "not_modeled", key));
  }
  for (const char* key : {"optimizer.params.lr", "scheduler", "gradient_clipping",
                          "zero_optimization.overlap_comm", "steps_per_print"}) {
    INFO(key);
    CHECK(lists(j, "no_effect", key));
  }
}

TEST_CASE("--reduce-bucket and --prefetch-bucket auto: the Trainer's H^2 and int(0.9 H^2)") {
  // transformers integrations/deepspeed.py: Llama-3-8B's hidden size 4096 gives 16,777,216 and
  // int(0.9 x 16,777,216) = 15,099,494 elements.
  const std::string base = "train -m llama-3-8b --dp 4 --zero 3";
  CHECK(without_from(base + " --reduce-bucket auto --prefetch-bucket auto") ==
        without_from(base + " --reduce-bucket 16777216 --prefetch-bucket 15099494"));
  CHECK(without_from(base + " --reduce-bucket auto") !=
        without_from(base + " --reduce-bucket 16777215"));
}

TEST_CASE("--from deepspeed: ZeRO-3's coordinator limits, read at stage 3 only") {
  // zero/config.py: stage3_max_live_parameters, stage3_max_reuse_distance and
  // stage3_param_persistence_threshold are integers of 0 or more; stages 1 and 2 read none of
  // them; stage3_model_persistence_threshold caps the persistent total, which vramfit does not.
  const std::string limits = R"("stage3_max_live_parameters": 2e8, "stage3_max_reuse_distance": 0,
      "stage3_param_persistence_threshold": 1e6, "stage3_model_persistence_threshold": 1e7})";
  const nlohmann::json three = json_of("train -m llama-3-8b --dp 4 --from deepspeed " +
                                       written("ds_limits3.json", R"({"zero_optimization":
          {"stage": 3, )" + limits + "}"));
  CHECK(from_options(three) == words{"--framework deepspeed", "--precision fp32", "--zero 3",
                                     "--max-live-parameters 200000000", "--max-reuse-distance 0",
                                     "--persistence-threshold 1000000"});
  CHECK(lists(three, "not_modeled", "zero_optimization.stage3_model_persistence_threshold"));
  const nlohmann::json two = json_of("train -m llama-3-8b --dp 4 --from deepspeed " +
                                     written("ds_limits2.json", R"({"zero_optimization":
          {"stage": 2, )" + limits + "}"));
  CHECK(from_options(two) == words{"--framework deepspeed", "--precision fp32", "--zero 2"});
  for (const char* key : {"zero_optimization.stage3_max_live_parameters",
                          "zero_optimization.stage3_max_reuse_distance",
                          "zero_optimization.stage3_param_persistence_threshold",
                          "zero_optimization.stage3_model_persistence_threshold"}) {
    INFO(key);
    CHECK(lists(two, "no_effect", key));
  }
  check_refusal(
      run("train --from deepspeed " + written("ds_limits_bad.json", R"({"zero_optimization":
          {"stage": 3, "stage3_max_live_parameters": -1}})")),
      "zero_optimization.stage3_max_live_parameters must be an integer from 0 to");
  // A prefetch bucket of 0 prefetches nothing, as DeepSpeed takes it.
  const nlohmann::json none = json_of("train -m llama-3-8b --dp 4 --from deepspeed " +
                                      written("ds_prefetch0.json", R"({"zero_optimization":
          {"stage": 3, "stage3_prefetch_bucket_size": 0}})"));
  CHECK(from_options(none) ==
        words{"--framework deepspeed", "--precision fp32", "--zero 3", "--prefetch-bucket 0"});
}

TEST_CASE("--from deepspeed: the other re-created examples") {
  const std::string base = "train -m llama-3-8b --from deepspeed ";
  // ZeRO-2 with its optimizer offloaded, two reduce buffers (overlap_comm), 2e8 each.
  CHECK(from_options(json_of(base + hf_zero2)) ==
        words{"--framework deepspeed", "--zero 2", "--reduce-bucket 200000000",
              "--overlap-comm true", "--offload optimizer", "--offload-to cpu", "--optimizer adamw",
              "--optimizer-impl fused"});
  CHECK(without_from(base + hf_zero2) ==
        without_from("train -m llama-3-8b --framework deepspeed --zero 2 --reduce-bucket 2e8 "
                     "--overlap-comm --offload optimizer --optimizer adamw --optimizer-impl "
                     "fused"));
  // DeepSpeedExamples' bf16 baseline: micro-batch 4, bf16, ZeRO-3 with a 5e7 bucket; its
  // torch_autocast is off.
  const nlohmann::json bf16 = json_of(base + ds + "dsexamples_bf16_master_weight_baseline.json");
  // Its stage3_param_persistence_threshold 0 keeps no parameter gathered for the run.
  CHECK(from_options(bf16) == words{"--framework deepspeed", "--micro-batch 4", "--grad-accum 1",
                                    "--precision bf16-fp32-master-16bit-grads", "--zero 3",
                                    "--reduce-bucket 50000000", "--persistence-threshold 0",
                                    "--optimizer adamw", "--optimizer-impl fused"});
  CHECK(lists(bf16, "no_effect", "torch_autocast"));
  CHECK(without_from(base + ds + "dsexamples_bf16_master_weight_baseline.json") ==
        without_from("train -m llama-3-8b --framework deepspeed --micro-batch 4 --grad-accum 1 "
                     "--precision bf16-fp32-master-16bit-grads --zero 3 --reduce-bucket 5e7 "
                     "--persistence-threshold 0 --optimizer adamw --optimizer-impl fused"));
  // SuperOffload's baseline: train_batch_size without the micro-batch needs the world size.
  const nlohmann::json offload =
      json_of(base + ds + "dsexamples_superoffload_llama-8b_zerooffload.json");
  CHECK(from_options(offload) == words{"--framework deepspeed", "--grad-accum 1",
                                       "--precision bf16-fp32-master-16bit-grads", "--zero 3",
                                       "--reduce-bucket 400000000", "--sub-group 400000000",
                                       "--offload optimizer", "--offload-to cpu"});
  CHECK(lists(offload, "not_modeled", "train_batch_size"));
  CHECK(without_from(base + ds + "dsexamples_superoffload_llama-8b_zerooffload.json") ==
        without_from("train -m llama-3-8b --framework deepspeed --grad-accum 1 --precision "
                     "bf16-fp32-master-16bit-grads --zero 3 --reduce-bucket 4e8 --sub-group 4e8 "
                     "--offload optimizer --offload-to cpu"));
  // AutoTP 4 under the Trainer: tensor parallelism from the file.
  CHECK(from_options(
            json_of(base + ds + "dsexamples_tensor_parallel_hf_integration_ds_config.json")) ==
        words{"--framework deepspeed", "--tp 4", "--zero 2", "--optimizer adamw",
              "--optimizer-impl fused"});
  CHECK(without_from(base + ds + "dsexamples_tensor_parallel_hf_integration_ds_config.json") ==
        without_from("train -m llama-3-8b --framework deepspeed --tp 4 --zero 2 --optimizer adamw "
                     "--optimizer-impl fused"));
}

TEST_CASE("--from deepspeed: train_batch_size gives the data-parallel degree") {
  // 64 = 2 x 4 x world: 8 ranks; under AutoTP 2 the world counts the TP ranks, 64 = 2 x 4 x 2 x 4.
  const std::string plain = written("ds_batch.json",
                                    R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                                        "gradient_accumulation_steps": 4})");
  CHECK(from_options(json_of("train --from deepspeed " + plain)) ==
        words{"--framework deepspeed", "--micro-batch 2", "--grad-accum 4", "--dp 8",
              "--precision fp32", "--zero 0"});
  const std::string tp = written("ds_batch_tp.json",
                                 R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                                     "gradient_accumulation_steps": 4,
                                     "tensor_parallel": {"autotp_size": 2}})");
  CHECK(from_options(json_of("train --from deepspeed " + tp)) ==
        words{"--framework deepspeed", "--micro-batch 2", "--grad-accum 4", "--tp 2", "--dp 4",
              "--precision fp32", "--zero 0"});
}

TEST_CASE("--from: the command line wins over the file, and says so") {
  const std::string file = written("ds_override.json",
                                   R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                                       "gradient_accumulation_steps": 4, "bf16": {"enabled": true},
                                       "zero_optimization": {"stage": 2}})");
  const nlohmann::json j = json_of("train --from deepspeed " + file + " -b 1 --dp 16");
  CHECK(lists(j, "overridden", "train_micro_batch_size_per_gpu"));
  CHECK(lists(j, "overridden", "train_batch_size"));
  CHECK(without_from("train --from deepspeed " + file + " -b 1 --dp 16") ==
        without_from("train --framework deepspeed --micro-batch 1 --grad-accum 4 --dp 16 "
                     "--precision bf16-fp32-master-16bit-grads --zero 2"));
  // --framework given: the file's framework is not taken, its options are.
  const nlohmann::json megatron = json_of("train --framework megatron --from deepspeed " + file);
  CHECK(lists(megatron, "overridden", "--from deepspeed"));
  // min-gpus searches the data-parallel degree, plan also the accumulation.
  CHECK(lists(json_of("min-gpus --from deepspeed " + file), "overridden", "train_batch_size"));
  const nlohmann::json plan = json_of("plan --gpus 8 --from deepspeed " + file);
  CHECK(lists(plan, "overridden", "gradient_accumulation_steps"));
  // The text names the file, the options and what is not modeled, before the estimate.
  const result text =
      run("train --from deepspeed " + written("ds_text.json", R"({"zero_optimization":
          {"stage": 1, "stage3_max_live_parameters": 1e9}, "a_key_of_mine": 1})"));
  REQUIRE(text.status == 0);
  CHECK(text.out.rfind("From deepspeed 'ds_text.json': --framework deepspeed --precision fp32 "
                       "--zero 1\n",
                       0) == 0);
  CHECK(text.out.find("  not modeled: a_key_of_mine = 1: not known to vramfit\n") !=
        std::string::npos);
}

TEST_CASE("--from deepspeed: bad files and contradictions, each one line naming the key") {
  const auto refused = [](const std::string& text, const std::string& part) {
    INFO(text);
    check_refusal(run("train --from deepspeed " + written("ds_bad.json", text)), part);
  };
  refused(R"({"zero_optimization": {"stage": "3"}})",
          "'ds_bad.json': zero_optimization.stage must be an integer from 0 to 3, got \"3\"");
  refused(R"({"zero_optimization": {"stage": 4}})", "zero_optimization.stage must be an integer");
  refused(R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})",
          "bf16.enabled and fp16.enabled are both true");
  refused(R"({"bf16": {"enabled": "yes"}})", "bf16.enabled must be true or false");
  refused(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4,
              "gradient_accumulation_steps": 1})",
          "train_batch_size 10 is not train_micro_batch_size_per_gpu");
  refused(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}})",
          "offload_optimizer.device must be none, cpu or nvme, got \"gpu\"");
  refused(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})",
          "offload_optimizer.device needs ZeRO stage 1, 2 or 3");
  refused(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
              "ratio": 0.5}}})",
          "ratio below 1 needs ZeRO stage 3");
  refused(R"({"optimizer": {"type": "Adam", "params": {"amsgrad": true}}})",
          "amsgrad is not supported by FusedAdam");
  refused(R"({"optimizer": {"type": "AdamW", "params": {"max_grad_norm": 1.0}}})",
          "max_grad_norm is not an optimizer parameter");
  refused(R"({"optimizer": {"type": "OneBitAdam"}, "zero_optimization": {"stage": 1}})",
          "OneBitAdam is not compatible with ZeRO");
  refused(R"({"data_types": {"grad_accum_dtype": "fp64"}})",
          "data_types.grad_accum_dtype must be fp32, fp16 or bf16");
  refused("[1, 2]", "must hold an object of keys, got an array of 2");
  refused("", "'ds_bad.json' is not valid JSON");
  refused("zero_stage = 3\n", "is not valid JSON");  // a TOML file given as DeepSpeed's
  refused(std::string(100, '[') + std::string(100, ']'), "nests deeper than 64 levels");
  refused(std::string("\xFF\xFE{\0}\0", 6), "is not UTF-8 (UTF-16 or UTF-32?)");
  check_refusal(run("train --from deepspeed no_such_ds.json"), "'no_such_ds.json' does not exist");
  check_refusal(run("train --from deepspeed"), "--from deepspeed needs a file");
  check_refusal(run("train --from deepspeeed x.json"),
                "unknown --from 'deepspeeed'; did you mean "
                "deepspeed?");
  check_refusal(run("infer --from deepspeed " + hf_zero2),
                "--from deepspeed applies to vramfit train, min-gpus and plan, not infer");
  check_refusal(run("train --from deepspeed " + hf_zero2 + " --from deepspeed " + hf_zero3),
                "--from is given twice");
}
