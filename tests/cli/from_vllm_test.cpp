// CLI tier: --from vllm -- WORDS, `vllm serve`'s words as vLLM's parser reads them, as vramfit
// infer's options. The fixtures (tests/data/from/vllm/*.args, one word a line) are command lines
// from vLLM's docs and vllm-project/recipes (provenance: the research notes, docs/from.md); the
// models' config.json files (tests/data/from/vllm/configs, re-created from the Hub's, the keys
// vramfit reads) sit in a Hugging Face cache laid out in the build tree, as vLLM reads them
// there to derive max_model_len.
#include <doctest/doctest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_support.hpp"

namespace {
namespace fs = std::filesystem;

using vramfit::cli_test::check_refusal, vramfit::cli_test::data_dir, vramfit::cli_test::lists,
    vramfit::cli_test::result, vramfit::cli_test::run;

const std::string fixtures = data_dir + "/from/vllm/";

/// HF_HUB_CACHE=<a cache holding the fixtures' config.json files>.
const std::string& hub_env() {
  static const std::string env = [] {
    const fs::path hub = fs::absolute("vramfit_vllm_hub_" + std::to_string(getpid()));
    const std::string commit = "0123456789abcdef0123456789abcdef01234567";
    for (const auto& entry : fs::directory_iterator(fixtures + "configs")) {
      const fs::path repo = hub / ("models--" + entry.path().stem().string());
      fs::create_directories(repo / "refs");
      fs::create_directories(repo / "snapshots" / commit);
      std::ofstream(repo / "refs" / "main") << commit;
      fs::copy_file(entry.path(), repo / "snapshots" / commit / "config.json",
                    fs::copy_options::overwrite_existing);
    }
    return "HF_HUB_CACHE=" + hub.string();
  }();
  return env;
}

/// `text` quoted for the shell.
std::string quoted(const std::string& text) {
  std::string q(1, '\'');  // built by appends: g++ 12 warns wrongly on "'" + string
  for (const char c : text) q.append(c == '\'' ? "'\\''" : std::string(1, c));
  return q.append(1, '\'');
}

/// A fixture's words, quoted, with a --config file found among the fixtures.
std::string words(const std::string& name) {
  std::ifstream in(fixtures + name);
  std::string line, out, previous;
  while (std::getline(in, line)) {
    out.append(1, ' ').append(quoted(previous == "--config" ? fixtures + line : line));
    previous = line;
  }
  return out;
}

/// vramfit infer with `before` and --from vllm -- `after`, in the fixtures' cache.
result from(const std::string& before, const std::string& after) {
  return run("infer " + before + " --from vllm --" + after, hub_env());
}

nlohmann::json parsed(const result& r) {
  INFO(r.err);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.out);
}

/// The "from" options as "option value <- key" lines.
std::vector<std::string> options(const nlohmann::json& j) {
  std::vector<std::string> lines;
  for (const auto& o : j.at("from").at("options"))
    lines.push_back(o.at("option").get<std::string>() + " " + o.at("value").get<std::string>() +
                    " <- " + o.at("key").get<std::string>());
  return lines;
}

/// The JSON without the "from" key.
nlohmann::json without_from(nlohmann::json j) {
  j.erase("from");
  return j;
}

/// Whether the answer says the CUDA graphs vLLM captures by default are not modeled.
bool graphs_unmodeled(const nlohmann::json& j) {
  for (const nlohmann::json& k : j["from"]["not_modeled"])
    if (k["key"] == "(default: CUDA graphs captured)") return true;
  return false;
}

/// A fixture: its options, and the same JSON as the explicit flags.
void check_fixture(const std::string& file, const std::string& gpu,
                   const std::vector<std::string>& expected, const std::string& explicit_flags) {
  CAPTURE(file);
  const nlohmann::json j = parsed(from(gpu + " -f json", words(file)));
  CHECK(options(j) == expected);
  CHECK(graphs_unmodeled(j) == (expected.back().find("--cuda-graphs") == std::string::npos));
  const nlohmann::json plain =
      parsed(run("infer " + gpu + " -f json " + explicit_flags, hub_env()));
  CHECK(without_from(j) == plain);
}
}  // namespace

TEST_CASE("--from vllm: each fixture's options, and the same JSON as the explicit flags") {
  check_fixture("recipes-Qwen3-235B-A22B-FP8-rocm-tp4.args", "-g mi300x",
                {"--framework vllm <- --from vllm", "--model Qwen/Qwen3-235B-A22B-FP8 <- model",
                 "--tp 4 <- tensor_parallel_size", "--utilization 80 <- gpu_memory_utilization",
                 "--context 32768 <- max_model_len",
                 "--max-num-batched-tokens 32768 <- max_num_batched_tokens"},
                "--framework vllm -m Qwen/Qwen3-235B-A22B-FP8 --tp 4 --context 32768 "
                "--utilization 80 --max-num-batched-tokens 32768");
  check_fixture(
      "recipes-Llama3.3-70B-Instruct-FP8-hopper.args", "-g h200",
      {"--framework vllm <- --from vllm", "--model nvidia/Llama-3.3-70B-Instruct-FP8 <- model",
       "--tp 1 <- tensor_parallel_size",
       "--utilization 92 <- (default: gpu_memory_utilization 0.92)",
       "--context 131072 <- (derived: max_model_len from config.json max_position_embeddings)",
       "--kv-dtype fp8 <- kv_cache_dtype",
       "--weights fp8 <- (config.json: quantization_config.quant_algo FP8)",
       "--max-num-batched-tokens 8192 <- max_num_batched_tokens"},
      "--framework vllm -m nvidia/Llama-3.3-70B-Instruct-FP8 --weights fp8 --tp 1 --context "
      "131072 --utilization 92 --kv-dtype fp8 --max-num-batched-tokens 8192");
  check_fixture(
      "docs-kthena-Llama-3.1-405B-Instruct-tp8-pp2.args", "-g h100",
      {"--framework vllm <- --from vllm", "--model meta-llama/Llama-3.1-405B-Instruct <- model",
       "--tp 8 <- tensor_parallel_size", "--pp 2 <- pipeline_parallel_size",
       "--utilization 92 <- (default: gpu_memory_utilization 0.92)",
       "--context 131072 <- (derived: max_model_len from config.json max_position_embeddings)"},
      "--framework vllm -m meta-llama/Llama-3.1-405B-Instruct --tp 8 --pp 2 --context 131072 "
      "--utilization 92");
  check_fixture(
      "recipes-DeepSeek-R1-0528-h200-tp8-ep.args", "-g h200",
      {"--framework vllm <- --from vllm", "--model deepseek-ai/DeepSeek-R1-0528 <- model",
       "--tp 8 <- tensor_parallel_size",
       "--utilization 92 <- (default: gpu_memory_utilization 0.92)",
       "--context 163840 <- (derived: max_model_len from config.json max_position_embeddings x "
       "rope factor)"},
      "--framework vllm -m deepseek-ai/DeepSeek-R1-0528 --tp 8 --context 163840 --utilization 92");
  check_fixture("docs-nixl-Qwen3-0.6B-prefiller-enforce-eager.args", "",
                {"--framework vllm <- --from vllm", "--model Qwen/Qwen3-0.6B <- model",
                 "--utilization 92 <- (default: gpu_memory_utilization 0.92)",
                 "--context 40960 <- (derived: max_model_len from config.json "
                 "max_position_embeddings)",
                 "--cuda-graphs 0 <- enforce_eager"},
                "--framework vllm -m Qwen/Qwen3-0.6B --context 40960 --utilization 92 "
                "--cuda-graphs 0");
  // OPT is not a model_type vramfit reads, nor an Intel XPU a GPU preset: a stand-in model and
  // a capacity, the file's --model overridden.
  check_fixture("docs-xpu-opt-13b-pp2-tp8.args", "-m llama-2-13b -g 96GiB",
                {"--framework vllm <- --from vllm", "--tp 8 <- tensor_parallel_size",
                 "--pp 2 <- pipeline_parallel_size",
                 "--utilization 92 <- (default: gpu_memory_utilization 0.92)",
                 "--context 1024 <- max_model_len", "--weights bf16 <- dtype"},
                "--framework vllm --weights bf16 --tp 8 --pp 2 --context 1024 --utilization 92");
  const nlohmann::json xpu =
      parsed(from("-m llama-2-13b -g 96GiB -f json", words("docs-xpu-opt-13b-pp2-tp8.args")));
  CHECK(lists(xpu, "overridden", "model"));
  CHECK(lists(xpu, "no_effect", "distributed_executor_backend"));
  const result opt = from("", words("docs-xpu-opt-13b-pp2-tp8.args"));
  CHECK(opt.status == 2);
  CHECK(opt.err.find("facebook/opt-13b") != std::string::npos);
}

TEST_CASE("--from vllm: what is not modeled, what changes nothing, and flags vLLM removed") {
  const nlohmann::json nixl =
      parsed(from("-f json", words("docs-nixl-Qwen3-0.6B-prefiller-enforce-eager.args")));
  CHECK(lists(nixl, "not_modeled", "kv_transfer_config"));
  CHECK(lists(nixl, "no_effect", "port"));
  const nlohmann::json qwen =
      parsed(from("-g mi300x -f json", words("recipes-Qwen3-235B-A22B-FP8-rocm-tp4.args")));
  for (const char* key : {"swap_space", "disable_log_requests", "trust_remote_code",
                          "distributed_executor_backend", "enable_prefix_caching"})
    CHECK(lists(qwen, "no_effect", key));
  // A flag vLLM does not know: listed with its value, never dropped.
  const nlohmann::json unknown =
      parsed(from("-f json", " Qwen/Qwen3-0.6B --no-such-flag 3 --cudagraph-capture-sizes 1 2 4"));
  CHECK(lists(unknown, "not_modeled", "no_such_flag"));
  CHECK(lists(unknown, "not_modeled", "cudagraph_capture_sizes"));
  const result text = from("", " Qwen/Qwen3-0.6B --no-such-flag 3");
  CHECK(text.out.find("not modeled: no_such_flag = \"3\": not known to vramfit") !=
        std::string::npos);
}

TEST_CASE("--from vllm: vLLM's syntax") {
  const auto context = [](const std::string& after) {
    const nlohmann::json j = parsed(from("-f json", " Qwen/Qwen3-0.6B" + after));
    for (const auto& o : j.at("from").at("options"))
      if (o.at("option") == "--context") return o.at("value").get<std::string>();
    return std::string();
  };
  CHECK(context(" --max_model_len=32k") == "32000");                   // underscores, =, decimal k
  CHECK(context(" --max-model-len 16K") == "16384");                   // binary K
  CHECK(context(" --max-model 4096") == "4096");                       // argparse's abbreviation
  CHECK(context(" --max-model-len 1k --max-model-len 2k") == "2000");  // the last wins
  // --model moved to the positional slot; -O0, dotted and JSON compilation configs.
  const auto options_of = [](const std::string& after) {
    return options(parsed(from("-f json", after)));
  };
  CHECK(options_of(" --max-model-len 4096 --model Qwen/Qwen3-0.6B").at(1) ==
        "--model Qwen/Qwen3-0.6B <- model");
  for (const char* eager :
       {" -O0", " -O 0", " -O=0", " --optimization-level 0", " --enforce-eager"}) {
    CAPTURE(eager);
    CHECK(options_of(std::string(" Qwen/Qwen3-0.6B") + eager)
              .back()
              .starts_with("--cuda-graphs 0 <- "));
  }
  CHECK(graphs_unmodeled(
      parsed(from("-f json", " Qwen/Qwen3-0.6B --enforce-eager --no-enforce-eager"))));
  for (const char* none : {" --compilation-config.cudagraph_mode NONE", " -cc.cudagraph_mode=NONE",
                           " -cc '{\"cudagraph_mode\": \"NONE\"}'"})
    CHECK(options_of(std::string(" Qwen/Qwen3-0.6B") + none).back() ==
          "--cuda-graphs 0 <- compilation_config.cudagraph_mode");
  // -tp=8 and -q: short aliases; --revision joins the id.
  CHECK(options_of(" Qwen/Qwen3-0.6B -tp=2 -q fp8").at(2) == "--tp 2 <- tensor_parallel_size");
  const result revision = from("", " Qwen/Qwen3-0.6B --revision abc --max-model-len 4096");
  CHECK(revision.err.find("has no revision 'abc'") != std::string::npos);
  // --config: the command line over the file, the file over the defaults; a false is dropped.
  const std::string yaml = "vramfit_vllm_config_" + std::to_string(getpid()) + ".yaml";
  std::ofstream(yaml) << "max-num-batched-tokens: 8192\nmax_num_seqs: 64\nenforce-eager: false\n"
                         "gpu-memory-utilization: '0.85'\n";
  const nlohmann::json j = parsed(
      from("-f json", " Qwen/Qwen3-0.6B --config " + yaml + " --max-num-batched-tokens 4096"));
  const std::vector<std::string> o = options(j);
  CHECK(std::find(o.begin(), o.end(), "--max-num-batched-tokens 4096 <- max_num_batched_tokens") !=
        o.end());
  CHECK(std::find(o.begin(), o.end(), "--max-num-seqs 64 <- max_num_seqs") != o.end());
  CHECK(std::find(o.begin(), o.end(), "--utilization 85 <- gpu_memory_utilization") != o.end());
  CHECK(graphs_unmodeled(j));
}

TEST_CASE("--from vllm: the command line's options override the arguments") {
  const nlohmann::json j = parsed(from("--utilization 85 --context 2048 -f json",
                                       words("recipes-Qwen3-235B-A22B-FP8-rocm-tp4.args")));
  CHECK(lists(j, "overridden", "gpu_memory_utilization"));
  CHECK(lists(j, "overridden", "max_model_len"));
  CHECK(j.at("from").at("overridden").size() == 2);
  CHECK(without_from(j) ==
        parsed(run("infer -f json --framework vllm -m Qwen/Qwen3-235B-A22B-FP8 --tp 4 "
                   "--max-num-batched-tokens 32768 --utilization 85 --context 2048",
                   hub_env())));
}

TEST_CASE("--from vllm: refusals, one line naming the words and the key") {
  const std::string qwen = " Qwen/Qwen3-0.6B";
  const std::string dir = "vramfit_vllm_bad_" + std::to_string(getpid());
  fs::create_directories(dir);
  const auto file = [&dir](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name, std::ios::binary) << text;
    return " --config " + dir + "/" + name;
  };
  const struct {
    std::string after, part;
  } cases[] = {
      {qwen + " --tensor-parallel-size two", "--tensor-parallel-size: invalid int value: 'two'"},
      {qwen + " --gpu-memory-utilization 1.5", "gpu_memory_utilization must be greater than 0"},
      {qwen + " --gpu-memory-utilization 0.925", "0.925 is not a whole percent"},
      {qwen + " --max-model-len 1.5K", "Decimals are not allowed with binary suffixes"},
      {qwen + " --max-model-len auto", "max_model_len auto (-1)"},
      {qwen + " --max-model-len 65536", "User-specified max_model_len (65536) is greater"},
      {qwen + " --max-num-batched-tokens 64 --max-num-seqs 128",
       "max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (128)"},
      {qwen + " --no-enable-chunked-prefill --max-num-batched-tokens 2048",
       "max_num_batched_tokens (2048) is smaller than max_model_len (40960)"},
      {qwen + " --kv-cache-dtype int8_per_token_head", "kv_cache_dtype \"int8_per_token_head\""},
      {qwen + " -q compressed-tensors", "quantization \"compressed-tensors\""},
      {" deepseek-ai/DeepSeek-R1-0528 -q awq", "does not match the quantization method"},
      {qwen + " --speculative-config '{\"method\": \"eagle\"}'", "speculative_config"},
      {qwen + " --kv-cache-memory-bytes 8G", "kv_cache_memory_bytes fixes the KV pool"},
      {qwen + " --enforce-eager=true", "ignored explicit argument 'true'"},
      {qwen + " --max-num 4", "ambiguous option: --max-num could match"},
      {qwen + " --tensor-parallel-size", "expected one argument"},
      {qwen + " extra", "unrecognized arguments: extra"},
      {qwen + " --compilation-config '{broken'", "--compilation-config takes JSON"},
      {" some/model.gguf --max-model-len 4096", "a GGUF file"},
      {" not-cached/model", "max_model_len is not given"},
      {qwen + " --config=x.yaml", "give --config FILE as two words"},
      {qwen + " --config a.yaml --config b.yaml", "More than one config file specified!"},
      // Another kind's file, a missing one, an empty one, deep nesting, UTF-16, a null.
      {qwen + " --config " + data_dir +
           "/from/deepspeed/hf-transformers_tests-deepspeed_ds_config_zero2.json",
       "Config file must be of a yaml/yml type. json supplied"},
      {qwen + " --config " + dir + "/missing.yaml", "missing.yaml' does not exist"},
      {qwen + file("empty.yaml", ""), "must hold a mapping of options"},
      {qwen + file("deep.yaml", "a: " + std::string(100, '[') + std::string(100, ']') + "\n"),
       "nests deeper than 64 levels"},
      {qwen + file("utf16.yaml", std::string("\xFF\xFEt\0p\0:\0 \0\x32\0", 12)), "not UTF-8"},
      {qwen + file("null.yaml", "gpu-memory-utilization: null\n"),
       "--gpu-memory-utilization: invalid float value: 'None'"},
      {" --config " + dir + "/null.yaml", "No model specified!"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.after);
    const result r = from("", c.after);
    check_refusal(r, c.part);
    CHECK(r.err.find("--from vllm arguments") != std::string::npos);
  }
  check_refusal(run("infer --from vllm Qwen/Qwen3-0.6B"), "its arguments follow --");
  check_refusal(run("train --from vllm -- Qwen/Qwen3-0.6B"),
                "--from vllm applies to vramfit infer");
}

TEST_CASE("--from vllm: --framework vllm is vLLM 0.21's 92 % and 16-token blocks") {
  CHECK(nlohmann::json::parse(run("infer --framework vllm -f json").out) ==
        nlohmann::json::parse(run("infer --utilization 92 --block 16 -f json").out));
}
