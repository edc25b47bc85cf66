// CLI tier: the ecosystem's own names. Hugging Face ids read offline from a cache laid out as
// huggingface_hub lays it out (tests/data/hf-cache), torch dtypes and HF optim names as aliases,
// and "did you mean" for a mistyped subcommand, option or choice.
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_support.hpp"

namespace {
namespace fs = std::filesystem;

using vramfit::cli_test::check_refusal, vramfit::cli_test::data_dir, vramfit::cli_test::result,
    vramfit::cli_test::run;

const std::string cache = data_dir + "/hf-cache";
const std::string hub_env = "HF_HUB_CACHE=" + cache;
const std::string id = "Qwen/Qwen2.5-0.5B";
const std::string commit = "ce9db8f82b98b9693c181d1a65a68a812a84fb01";
const std::string snapshot_config =
    cache + "/models--Qwen--Qwen2.5-0.5B/snapshots/" + commit + "/config.json";

/// The JSON of a run, with the model's name left out.
nlohmann::json unnamed(const result& r) {
  REQUIRE(r.status == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  if (j.contains("model") && j["model"].is_object()) j["model"].erase("name");
  return j;
}

/// `text` with each `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at))
    text.replace(at, from.size(), to), at += to.size();
  return text;
}

/// A copy of the fixture cache in the build tree, which a test may break.
std::string scratch_cache(const std::string& name) {
  const std::string dir = "vramfit_eco_cache_" + name + "_" + std::to_string(getpid());
  fs::remove_all(dir);
  fs::copy(cache, dir, fs::copy_options::recursive);
  return fs::absolute(dir).string();
}
}  // namespace

TEST_CASE("a Hugging Face id in the cache gives the same JSON as its config.json, named by id") {
  for (const std::string& command :
       {std::string("train -f json"), std::string("infer -f json"), std::string("load -f json"),
        std::string("min-gpus -f json --fsdp full"), std::string("plan -f json --gpus 2")}) {
    CAPTURE(command);
    const result by_id = run(command + " --model " + id, hub_env);
    const result by_path = run(command + " --model " + snapshot_config);
    REQUIRE(by_id.status == 0);
    REQUIRE(by_path.status == 0);
    // The same JSON, but for the model's name (the path's: its folder, cut to 39 bytes) and a
    // plan's command lines (the --model given).
    const std::string path_name = commit.substr(0, 39);
    CHECK(
        nlohmann::json::parse(by_id.out) ==
        nlohmann::json::parse(replaced(replaced(by_path.out, snapshot_config, id), path_name, id)));
    CHECK(by_id.out.find(id) != std::string::npos);
  }
}

TEST_CASE("the cache's folder: HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME, else HOME") {
  const std::string home = scratch_cache("home");
  fs::create_directories(home + "/h/.cache/huggingface");
  fs::create_directories(home + "/hf-home");
  fs::create_directories(home + "/xdg/huggingface");
  fs::copy(cache, home + "/h/.cache/huggingface/hub", fs::copy_options::recursive);
  fs::copy(cache, home + "/hf-home/hub", fs::copy_options::recursive);
  fs::copy(cache, home + "/xdg/huggingface/hub", fs::copy_options::recursive);
  const std::string none = "-u HF_HUB_CACHE -u HUGGINGFACE_HUB_CACHE -u HF_HOME -u XDG_CACHE_HOME";
  const std::string train = "train -f json --model " + id;
  const nlohmann::json expected = unnamed(run(train, hub_env));
  CHECK(unnamed(run(train, none + " HF_HOME=" + home + "/hf-home")) == expected);
  CHECK(unnamed(run(train, none + " XDG_CACHE_HOME=" + home + "/xdg")) == expected);
  CHECK(unnamed(run(train, none + " HOME=" + home + "/h")) == expected);
  // HF_HUB_CACHE wins over HF_HOME, as in huggingface_hub's constants.py.
  CHECK(run(train, hub_env + " HF_HOME=/nonexistent").status == 0);
  check_refusal(run(train, "HF_HUB_CACHE=/nonexistent HF_HOME=" + home + "/hf-home"),
                "/nonexistent/models--Qwen--Qwen2.5-0.5B");
  fs::remove_all(home);
}

TEST_CASE("an id's @revision: a ref under refs/ or a commit under snapshots/") {
  const nlohmann::json main = unnamed(run("train -f json --model " + id, hub_env));
  CHECK(unnamed(run("train -f json --model " + id + "@main", hub_env)) == main);
  CHECK(unnamed(run("train -f json --model " + id + "@" + commit, hub_env)) == main);
  check_refusal(run("train --model " + id + "@v9", hub_env),
                "has no revision 'v9' in the Hugging Face cache");
  check_refusal(run("train --model " + id + "@v9", hub_env),
                "huggingface-cli download " + id + " --revision v9 config.json");
  check_refusal(run("train --model " + id + "@../../x", hub_env), "the revision after '@'");
  check_refusal(run("train --model " + id + "@", hub_env), "the revision after '@'");
}

TEST_CASE("an id not in the cache: one line naming it, the folder, and the command that fetches") {
  const result r = run("train --model meta-llama/Llama-3.1-70B", hub_env);
  check_refusal(r, "--model 'meta-llama/Llama-3.1-70B'");
  CHECK(r.err.find(cache + "/models--meta-llama--Llama-3.1-70B") != std::string::npos);
  CHECK(r.err.find("huggingface-cli download meta-llama/Llama-3.1-70B config.json") !=
        std::string::npos);
  for (const char* command : {"infer", "load", "plan --gpus 2", "min-gpus"})
    check_refusal(run(std::string(command) + " --model meta-llama/Llama-3.1-70B", hub_env),
                  "vramfit does not download");
}

TEST_CASE("bad ids and broken caches: one line, status 2, never a crash") {
  for (const char* bad : {"../x", "a/../../b", "org/", "a//b", "-org/name", "org/name.", "a--b/c",
                          "org/name.git", "org/na$me"}) {
    CAPTURE(bad);
    check_refusal(run(std::string("train --model '") + bad + "'", hub_env),
                  "nor a Hugging Face id");
  }
  check_refusal(run("train --model org/" + std::string(100, 'x'), hub_env),
                "at most 96 characters");
  const std::string broken = scratch_cache("broken");
  const std::string repo = broken + "/models--Qwen--Qwen2.5-0.5B";
  const std::string env = "HF_HUB_CACHE=" + broken;
  std::ofstream(repo + "/refs/main") << "../../../../etc\n";
  check_refusal(run("train --model " + id, env), "does not hold a commit hash");
  std::ofstream(repo + "/refs/main") << std::string(1 << 16, 'a');
  check_refusal(run("train --model " + id, env), "does not hold a commit hash");
  fs::remove(repo + "/refs/main");
  fs::create_symlink("main", repo + "/refs/main");  // refs/main -> itself
  check_refusal(run("train --model " + id, env), "symbolic link loop");
  fs::remove(repo + "/refs/main");
  std::ofstream(repo + "/refs/main") << commit;
  const std::string config = repo + "/snapshots/" + commit + "/config.json";
  fs::remove(config);
  fs::create_symlink("config.json", config);
  check_refusal(run("train --model " + id, env), "symbolic link loop");
  fs::remove(config);
  check_refusal(run("train --model " + id, env), "has no config.json in the Hugging Face cache");
  std::ofstream(config) << std::string(100, '[') << std::string(100, ']');
  check_refusal(run("train --model " + id, env), "nests deeper than");
  fs::remove(config);
  fs::create_directory(config);
  check_refusal(run("train --model " + id, env), "--model '" + id + "'");
  fs::remove_all(broken);
}

TEST_CASE("torch dtypes are aliases of the formats they are") {
  const auto same = [](const std::string& a, const std::string& b) {
    CAPTURE(a);
    const result x = run(a), y = run(b);
    REQUIRE(x.status == 0);
    REQUIRE(y.status == 0);
    CHECK(x.out == y.out);
  };
  same("train -f json -m gpt2 --precision bfloat16", "train -f json -m gpt2 --precision bf16");
  same("train -f json -m gpt2 --precision torch.float16", "train -f json -m gpt2 --precision fp16");
  same("train -f json -m gpt2 --precision float32", "train -f json -m gpt2 --precision fp32");
  same("train -f json -m gpt2 --grad-dtype torch.bfloat16",
       "train -f json -m gpt2 --grad-dtype bf16");
  same("train -f json -m llama-3-8b --lora-rank 8 --lora-dtype half",
       "train -f json -m llama-3-8b --lora-rank 8 --lora-dtype fp16");
  same("infer -f json -m gpt2 --weights float16", "infer -f json -m gpt2 --weights fp16");
  same("infer -f json -m gpt2 --kv-dtype torch.float8_e4m3fn",
       "infer -f json -m gpt2 --kv-dtype fp8");
  same("infer -f json -m gpt2 --kv-dtype fp8_e4m3", "infer -f json -m gpt2 --kv-dtype fp8");
  same("load -f json -m gpt2 --weights nf4 --checkpoint-dtype float32",
       "load -f json -m gpt2 --weights nf4 --checkpoint-dtype fp32");
  // torch has int8 tensors, but vramfit's int8 KV cache carries scales: not the same thing.
  check_refusal(run("infer -m gpt2 --kv-dtype torch.int8"), "unknown KV dtype 'torch.int8'");
}

TEST_CASE("Hugging Face optim names: aliases where vramfit models the same optimizer") {
  const auto optimizer = [](const std::string& name) {
    return run("train -f json -m gpt2 --optimizer " + name);
  };
  for (const auto& [hf_name, own] :
       std::vector<std::pair<std::string, std::string>>{{"adamw_torch", "adamw"},
                                                        {"adamw_torch_fused", "adamw-fused"},
                                                        {"adamw_8bit", "adamw-8bit"},
                                                        {"adamw_bnb_8bit", "adamw-8bit"},
                                                        {"paged_adamw_8bit", "paged-adamw-8bit"},
                                                        {"ADAMW_TORCH", "adamw"}}) {
    const std::string hf = hf_name;  // clang 14: a lambda (CAPTURE) cannot name a binding
    CAPTURE(hf);
    const result a = optimizer(hf), b = optimizer(own);
    REQUIRE(a.status == 0);
    CHECK(a.out == b.out);
  }
  for (const char* same : {"sgd", "adagrad", "rmsprop", "adafactor"})
    CHECK(optimizer(same).status == 0);
  for (const auto& [hf_name, why] : std::vector<std::pair<std::string, std::string>>{
           {"paged_adamw_32bit", "paged-adamw-8bit only"},
           {"lion_32bit", "lion-pytorch"},
           {"adamw_torch_4bit", "torchao"},
           {"galore_adamw", "GaLore"}}) {
    const std::string hf = hf_name;
    CAPTURE(hf);
    const result r = optimizer(hf);
    check_refusal(r, "is not modeled by vramfit");
    CHECK(r.err.find(why) != std::string::npos);
  }
}

TEST_CASE("did you mean: a subcommand, an option, a choice, a GPU") {
  check_refusal(run("trian"), "unknown subcommand 'trian'; did you mean train?");
  check_refusal(run("--units GB infr"), "unknown subcommand 'infr'; did you mean infer?");
  check_refusal(run("train --micro-batchh 2"),
                "unknown option '--micro-batchh'; did you mean --micro-batch?");
  check_refusal(run("infer --kv-dtyp fp8"), "did you mean --kv-dtype");
  check_refusal(run("train --precision bf61"), "did you mean bf16");
  check_refusal(run("train --optimizer adamw_torh"), "did you mean adamw_torch");
  check_refusal(run("train --gpu 4090"), "did you mean rtx-4090?");
  check_refusal(run("train --gpu rtx4090"), "did you mean rtx-4090");
  const result none = run("train --gpu zzzz");  // nothing close: the list alone
  check_refusal(none, "unknown --gpu 'zzzz'; known: h100");
  CHECK(none.err.find("did you mean") == std::string::npos);
}
