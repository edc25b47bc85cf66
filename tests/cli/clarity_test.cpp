// CLI tier: output clarity (issue 37). The vLLM pool's verdict, contexts past a learned position
// table, --help listing only what a subcommand accepts, and one meaning for each exit status.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_support.hpp"

namespace {
using vramfit::cli_test::check_refusal, vramfit::cli_test::result, vramfit::cli_test::run;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("vLLM's KV pool ends with a verdict: fits when --batch sequences fit the pool") {
  const std::string pool = "infer --model gpt2 --utilization 90 ";
  const result fits = run(pool + "--gpu 1GiB");
  REQUIRE(fits.status == 0);
  CHECK(has(fits.out, "GPU of 1GiB: a KV pool of "));
  CHECK(has(fits.out, " sequences, batch 1 -> fits\n"));
  // A pool of 0 sequences (the weights leave nothing): the verdict says so; --check exits 1.
  const result none = run(pool + "--gpu 256MiB");
  CHECK(none.status == 0);
  CHECK(has(none.out, "a KV pool of 0 sequences, batch 1 -> does not fit\n"));
  CHECK(run(pool + "--gpu 256MiB --check").status == 1);
  // More sequences than the pool holds: does not fit, in the table and the JSON alike.
  const result many = run(pool + "--gpu 1GiB --batch 100000");
  CHECK(has(many.out, "batch 100,000 -> does not fit\n"));
  CHECK(run(pool + "--gpu 1GiB --batch 100000 --check").status == 1);
  const result json = run(pool + "--gpu 1GiB --batch 100000 -f json");
  REQUIRE(json.status == 0);
  CHECK(nlohmann::json::parse(json.out)["fits"] == false);
  CHECK(nlohmann::json::parse(run(pool + "--gpu 1GiB -f json").out)["fits"] == true);
}

TEST_CASE("infer refuses a context past a learned position table, as train refuses the sequence") {
  const std::string why = "GPT-2 (124M)'s learned position table has 1024 rows";
  check_refusal(run("train --model gpt2 --seq-len 1025"), why);
  check_refusal(run("infer --model gpt2 --context 1025"), why);
  check_refusal(run("infer --model gpt2 --context 1000 --generate 25"), why);
  check_refusal(run("infer --model gpt2 --context 1025 --utilization 90"), why);
  CHECK(run("infer --model gpt2 --context 1000 --generate 24").status == 0);
  CHECK(run("train --model gpt2 --seq-len 1024").status == 0);
  // A rotary model's max_position_embeddings is not read: both take a longer sequence.
  CHECK(run("train --model llama-3-8b --seq-len 16384").status == 0);
  CHECK(run("infer --model llama-3-8b --context 16384").status == 0);
}

TEST_CASE("plan's and min-gpus's --help list only what they accept, and refuse the rest") {
  const std::string plan_help = run("plan --help").out;
  const std::string fewest_help = run("min-gpus --help").out;
  REQUIRE(has(plan_help, "--gpus"));
  REQUIRE(has(fewest_help, "--fsdp"));
  const std::vector<std::string> refused_by_plan = {"--grad-accum 2",
                                                    "--pp-stages 6,6",
                                                    "--sp",
                                                    "--recompute-layers 2",
                                                    "--recompute-every 2",
                                                    "--offload optimizer",
                                                    "--offload-to nvme",
                                                    "--sweep micro-batch",
                                                    "--reshard-after-forward false",
                                                    "--backward-prefetch none",
                                                    "--forward-prefetch",
                                                    "--limit-all-gathers false",
                                                    "--timeline"};
  for (const std::string& given : refused_by_plan) {
    CAPTURE(given);
    const std::string name = given.substr(0, given.find(' '));
    CHECK_FALSE(has(plan_help, "  " + name + " "));
    CHECK_FALSE(has(plan_help, "  " + name + "\n"));
    const result r = run("plan --model gpt2 --gpus 2 " + given);
    CHECK(r.status == 2);
    CHECK(r.err.find('\n') == r.err.size() - 1);
  }
  for (const char* given : {"--dp 2", "--sweep micro-batch", "--timeline"}) {
    CAPTURE(given);
    const std::string option(given);
    CHECK_FALSE(has(fewest_help, "  " + option.substr(0, option.find(' ')) + " "));
    CHECK(run("min-gpus --model gpt2 " + option).status == 2);
  }
}

TEST_CASE(
    "exit status: 0 answered, 1 does not fit under --check, 2 bad input, in every subcommand") {
  struct subcommand {
    std::string fitting, not_fitting;
  };
  const std::vector<subcommand> subcommands = {
      {"train --model gpt2", "train --model gpt2 --gpu 1GiB"},
      {"infer --model gpt2", "infer --model gpt2 --gpu 256MiB"},
      {"infer --model gpt2 --utilization 90", "infer --model gpt2 --utilization 90 --gpu 256MiB"},
      {"load --model gpt2", "load --model gpt2 --gpu 256MiB"},
      {"plan --model gpt2 --gpus 2", "plan --model gpt2 --gpus 2 --gpu 1GiB"},
      {"min-gpus --model gpt2", "min-gpus --model gpt2 --gpu 1GiB"}};
  for (const subcommand& s : subcommands) {
    CAPTURE(s.fitting);
    CHECK(run(s.fitting).status == 0);
    CHECK(run(s.fitting + " --check").status == 0);
    CHECK(run(s.not_fitting).status == 0);  // an answer, though it does not fit
    const result checked = run(s.not_fitting + " --check");
    CHECK(checked.status == 1);
    CHECK_FALSE(checked.out.empty());  // the answer is still printed
    CHECK(checked.err.empty());
    check_refusal(run(s.fitting + " --gpu nonesuch"), "nonesuch");
  }
}

TEST_CASE("vLLM's and Hugging Face's flag names: the same answer as vramfit's, or one line") {
  const auto same = [](const std::string& theirs, const std::string& ours) {
    CAPTURE(theirs);
    const result a = run(theirs), b = run(ours);
    CHECK(a.status == 0);
    CHECK(a.out == b.out);
  };
  // vLLM: names whose meaning is the same (vllm serve --help, EngineArgs).
  same("infer -m gpt2 --max-model-len 512", "infer -m gpt2 --context 512");
  same("infer --tensor-parallel-size 2 --pipeline-parallel-size 2", "infer --tp 2 --pp 2");
  // gpu_memory_utilization is a fraction (CacheConfig: gt=0, le=1): 0.9 is 90 percent.
  same("infer -m gpt2 --gpu 1GiB --gpu-memory-utilization 0.9",
       "infer -m gpt2 --gpu 1GiB --utilization 90");
  same("infer -m gpt2 --gpu 1GiB --gpu-memory-utilization 1",
       "infer -m gpt2 --gpu 1GiB --utilization 100");
  for (const char* bad : {"0.925", "1.5", "0", "-0.5", "abc", "90"})
    check_refusal(run(std::string("infer -m gpt2 --gpu-memory-utilization ") + bad),
                  "--gpu-memory-utilization takes vLLM's fraction");
  check_refusal(run("infer -m gpt2 --gpu-memory-utilization 0.9 --utilization 80"),
                "--gpu-memory-utilization sets --utilization: give one of them");
  check_refusal(run("infer -m gpt2 --gpu-memory-utilization 0.9 --gpu-memory-utilization 0.8"),
                "--gpu-memory-utilization");
  CHECK(run("infer -m gpt2 --context 512 --max-model-len 512").status == 2);
  // --framework vllm's default utilization (92) gives way to the alias, as to --utilization.
  CHECK(has(run("infer -m gpt2 --gpu 1GiB --framework vllm --gpu-memory-utilization 0.5").out,
            "vLLM KV pool at 50 % of"));
  // Hugging Face TrainingArguments.
  same("train -m gpt2 --per-device-train-batch-size 4 --gradient-accumulation-steps 2",
       "train -m gpt2 -b 4 --grad-accum 2");
  // gradient_checkpointing as --from hf-trainer reads it: full, non-reentrant (transformers 5).
  same("train -m gpt2 --gradient-checkpointing", "train -m gpt2 --recompute full --non-reentrant");
  same("train -m gpt2 --gradient-checkpointing --non-reentrant",
       "train -m gpt2 --recompute full --non-reentrant");
  same("train -m gpt2 --gradient-checkpointing=false", "train -m gpt2 --recompute none");
  same("min-gpus -m llama-3-8b --fsdp full --gradient-checkpointing",
       "min-gpus -m llama-3-8b --fsdp full --recompute full --non-reentrant");
  check_refusal(run("train -m gpt2 --gradient-checkpointing --recompute selective"),
                "--gradient-checkpointing sets --recompute: give one of them");
  // plan: the alias fixes the recompute policy; its train line names the real options.
  same("plan -m gpt2 --gpus 2 --gradient-checkpointing",
       "plan -m gpt2 --gpus 2 --recompute full --non-reentrant");
  const std::string planned = run("plan -m gpt2 --gpus 2 --gradient-checkpointing --top 1").out;
  const std::size_t from = planned.find("`vramfit ") + 9;
  const std::string train_line = planned.substr(from, planned.find('`', from) - from);
  CHECK(has(train_line, "--recompute full"));
  CHECK_FALSE(has(train_line, "--gradient-checkpointing"));
  CHECK(run(train_line).status == 0);
  check_refusal(run("plan -m gpt2 --gpus 2 --gradient-accumulation-steps 2"),
                "--grad-accum is not a plan option");
  // Neither --help's option lines nor the completion script (the parser's first long names, as
  // the Python keywords) list an alias as an option of its own.
  const std::string script = run("completion bash").out;
  for (const char* alias : {"--per-device-train-batch-size", "--gradient-accumulation-steps",
                            "--gradient-checkpointing", "--gpu-memory-utilization",
                            "--max-model-len", "--tensor-parallel-size"}) {
    CAPTURE(alias);
    CHECK_FALSE(has(script, alias));
    CHECK_FALSE(
        has(run("train --help").out + run("infer --help").out, std::string("\n  ") + alias));
  }
}

TEST_CASE("min-gpus with hybrid FSDP searches from the shard group up") {
  // Hybrid FSDP shards within its group only: at a degree equal to the group it is full
  // sharding (Llama-3-8B fits 4 H100s so), and no degree below the group is a layout at all.
  const auto fewest = [](const std::string& sharding) {
    const result r = run("min-gpus -m llama-3-8b --recompute full -f json " + sharding);
    INFO(sharding << " -> " << r.err);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(r.out).at("data_parallel").get<std::int64_t>();
  };
  REQUIRE(fewest("--fsdp full") == 4);
  CHECK(fewest("--fsdp hybrid --fsdp-group 4") == 4);
  CHECK(fewest("--fsdp hybrid --fsdp-group 8") == 8);
  CHECK(fewest("--fsdp hybrid --fsdp-group 2") == 0);  // halves never fit, however many replicas
}

TEST_CASE("train's table says which column adds up, and what buffers and the host hold") {
  const result r = run("train -m llama-3-8b");
  REQUIRE(r.status == 0);
  CHECK(has(r.out, "at peak adds up to the total; at its most does not"));
  CHECK(has(r.out, "optimizer step temporaries"));  // the buffers row names its entries
  CHECK(has(r.out, "host memory              1.14 KiB  optimizer states on the host"));
  // The at-peak parts, added here, are the nvidia-smi peak; the at-its-most parts exceed it.
  const nlohmann::json j = nlohmann::json::parse(run("train -m llama-3-8b -f json").out);
  std::int64_t at_peak = 0, at_most = 0;
  for (const char* c : {"weights", "gradients", "optimizer_states", "master_weights", "activations",
                        "kv_cache", "buffers", "overhead"}) {
    at_peak += j.at("at_peak").at(c).get<std::int64_t>();
    at_most += j.at("memory").at(c).get<std::int64_t>();
  }
  CHECK(at_peak == j.at("memory").at("nvidia_smi").get<std::int64_t>());
  CHECK(at_most > at_peak);
  CHECK(has(run("train -m llama-3-8b --metric allocated").out, ", the nvidia-smi peak;"));
}
