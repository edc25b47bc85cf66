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
