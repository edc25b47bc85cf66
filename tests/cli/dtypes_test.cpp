// CLI tier: --dtypes, a row per weight format (infer) or precision (train). Each row is checked
// against the same command run with that one format (--weights X, --precision X), the
// independent path, and one figure of each against a hand derivation from the parameter count.
#include <doctest/doctest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_support.hpp"

namespace {
using namespace vramfit::cli_test;

/// The rows of `args` with --dtypes, by their format.
nlohmann::json rows_of(const std::string& args) {
  return json_of(args)["dtypes"];
}

// Llama-3-8B (config tests/data/hf/llama-3-8b.json): hidden 4096, MLP 14336, 32 layers, 8 KV
// heads of 128, vocabulary 128,256, untied head: 8,030,261,248 parameters.
constexpr std::int64_t llama3_8b_parameters = 8'030'261'248;

}  // namespace

TEST_CASE("infer --dtypes: each row is infer --weights X's estimate") {
  const std::string shape = "infer -m llama-3-8b --batch 4 --context 8192 --gpu 24GiB";
  const nlohmann::json rows = rows_of(shape + " --dtypes");
  const std::vector<std::string> defaults = {"bf16", "fp8", "int8", "nf4", "gptq"};
  REQUIRE(rows.size() == defaults.size());
  bool some_fit = false, some_not = false;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& row = rows[i];
    INFO(row.dump());
    CHECK(row["weights_format"] == defaults[i]);
    const nlohmann::json one = json_of(shape + " --weights " + defaults[i]);
    CHECK(row["weights"] == one["memory"]["weights"]);
    CHECK(row["total"] == one["memory"]["total"]);
    CHECK(row["fits"] == one["fits"]);
    CHECK(row["max_batch"] == one["max_batch"]);
    CHECK(row["max_context"] == one["max_context"]);
    (row["fits"].get<bool>() ? some_fit : some_not) = true;
  }
  CHECK((some_fit && some_not));  // 24 GiB: bf16 does not fit at this batch, 4-bit does

  // NF4 with double quantization, by hand from the format (QLoRA section 2; bitsandbytes
  // quantize_4bit blocksize 64, compress_statistics): per linear weight of n elements, n/2 bytes
  // of codes, an 8-bit absmax per 64 elements, an fp32 scale per 256 absmax and an fp32 offset.
  // q, o: 4096 x 4096; k, v: 1024 x 4096; gate, up, down: 14336 x 4096.
  const auto nf4_dq = [](std::int64_t n) {
    const std::int64_t blocks = n / 64;  // each n here is a multiple of 64 x 256
    return n / 2 + blocks + blocks / 256 * 4 + 4;
  };
  const std::int64_t layer =
      2 * nf4_dq(4096 * 4096) + 2 * nf4_dq(1024 * 4096) + 3 * nf4_dq(14336 * 4096);
  const std::int64_t linear =
      std::int64_t{32} * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096);
  // The rest stays bf16 (embeddings, head, norms: bnb skips the head and non-Linear modules).
  const std::int64_t nf4_weights = 32 * layer + 2 * (llama3_8b_parameters - linear);
  CHECK(nf4_weights == 5'702'296'448);
  CHECK(rows[3]["weights"] == nf4_weights);
  CHECK(rows[0]["weights"] == 2 * llama3_8b_parameters);  // bf16: 2 bytes each
}

TEST_CASE("infer --dtypes: lists, aliases, and the table and Markdown show each row") {
  const std::string base = "infer -m qwen2.5-7b";
  const nlohmann::json spaced = rows_of(base + " --dtypes nf4 float16");
  REQUIRE(spaced.size() == 2);
  CHECK(spaced[0]["weights_format"] == "nf4");
  CHECK(spaced[1]["weights_format"] == "fp16");                    // torch's name for it
  CHECK(rows_of(base + " --dtypes=nf4 --dtypes=fp16") == spaced);  // Python's form
  CHECK(rows_of(base + " --dtypes nf4,fp16") == spaced);
  const result table = run(base + " --dtypes nf4,fp16 --units GB");
  CHECK(table.status == 0);
  CHECK(table.out.find("weights per row") != std::string::npos);
  CHECK(table.out.find("\n  nf4 ") != std::string::npos);
  CHECK(table.out.find("\n  fp16") != std::string::npos);
  CHECK(table.out.find(" GB") != std::string::npos);
  const result markdown = run(base + " --dtypes nf4,fp16 -f markdown");
  CHECK(markdown.out.find("| nf4 |") != std::string::npos);
  CHECK(markdown.out.find("| fp16 |") != std::string::npos);
}

TEST_CASE("infer --dtypes: refused with what it replaces or cannot show") {
  const std::string base = "infer -m llama-3-8b --dtypes";
  check_refusal(run(base + " --weights nf4"), "leave out --weights");
  check_refusal(run(base + " --utilization 90"), "--utilization");
  check_refusal(run(base + " --check"), "--check");
  check_refusal(run(base + " -f svg"), "-f svg");
  check_refusal(run(base + " bf16,int3"), "unknown --dtypes weight format 'int3'");
  check_refusal(run(base + " bf16,,fp8"), "--dtypes 'bf16,,fp8': an empty name");
  check_refusal(run(base + " bf16,bfloat16"), "--dtypes names bf16 twice");
  check_refusal(run(base + " ''"), "--dtypes");
  check_refusal(run("infer --params 7e9 --dtypes"), "--dtypes");
}

TEST_CASE("train --dtypes: each row is train --precision X's estimate") {
  const std::string shape = "train -m llama-3-8b --seq-len 1024 --gpu h200";
  const nlohmann::json rows = rows_of(shape + " --dtypes");
  const std::vector<std::string> defaults = {"fp32", "amp-bf16", "bf16-fp32-master", "bf16"};
  REQUIRE(rows.size() == defaults.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& row = rows[i];
    INFO(row.dump());
    CHECK(row["precision"] == defaults[i]);
    const nlohmann::json one = json_of(shape + " --precision " + defaults[i]);
    CHECK(row["weights"] == one["memory"]["weights"]);
    CHECK(row["master_weights"] == one["memory"]["master_weights"]);
    CHECK(row["total"] == one["memory"]["total"]);
    CHECK(row["fits"] == one["fits"]);
    CHECK(row["max_micro_batch"] == one["max_micro_batch"]);
    CHECK(row["max_sequence"] == one["max_sequence"]);
  }
  // By hand: fp32 weights are 4 bytes a parameter; bf16-fp32-master keeps 2-byte weights and a
  // 4-byte master (Megatron-LM's Float16OptimizerWithFloat16Params); pure bf16 has no master.
  CHECK(rows[0]["weights"] == 4 * llama3_8b_parameters);
  CHECK(rows[2]["weights"] == 2 * llama3_8b_parameters);
  CHECK(rows[2]["master_weights"] == 4 * llama3_8b_parameters);
  CHECK(rows[3]["master_weights"] == 0);
}

TEST_CASE("train --dtypes: refused with what it replaces or cannot show") {
  const std::string base = "train -m gpt2 --dtypes";
  check_refusal(run(base + " --precision fp32"), "leave out --precision");
  for (const char* o : {"--sweep micro-batch", "--timeline", "--explain", "--check", "-f svg"}) {
    INFO(o);
    check_refusal(run(base + " " + o), "--dtypes compares one estimate per precision");
  }
  check_refusal(run(base + " fp32,int4"), "unknown --dtypes precision 'int4'");
  check_refusal(run("train --params 7e9 --dtypes"), "--dtypes");
  // min-gpus and plan take train's options but not this one.
  CHECK(run("min-gpus --dtypes").status == 2);
  CHECK(run("plan --dtypes").status == 2);
}
