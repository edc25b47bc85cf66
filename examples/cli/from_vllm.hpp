// SPDX-License-Identifier: MIT
// --from vllm -- MODEL --max-model-len N ...: the words after `vllm serve`, read as vLLM's
// FlexibleArgumentParser reads them (vllm/utils/argparse_utils.py parse_args, its options from
// vllm/engine/arg_utils.py EngineArgs.add_cli_args and vllm/entrypoints/openai/cli_args.py
// make_arg_parser; vLLM main at 48ebd6f2, v0.26), then its memory flags as vramfit infer's
// options (docs/from.md, "--from vllm").
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ecosystem_aliases.hpp"
#include "hf_cache.hpp"
#include "inputs.hpp"
#include "launcher_file.hpp"

namespace vramfit::cli {

namespace detail_vllm {

/// How an option takes its value, as arg_utils.py _compute_kwargs derives it from the config
/// dataclass's annotation.
enum class takes : char {
  flag,          ///< bool: argparse.BooleanOptionalAction, --x and --no-x
  store_true,    ///< action="store_true": --x only
  maybe,         ///< bool | str | None: a bare --x is true, else its value (nargs "?")
  integer,       ///< int
  human,         ///< human_readable_int: 1k = 1000, 1K = 1024
  real,          ///< float
  json,          ///< a config dataclass or a dict: json.loads / validate_json
  json_or_text,  ///< union_dict_and_str: JSON when it looks like {...}, else the text
  list,          ///< list, tuple or set: nargs "+"
  text,          ///< str or a Literal of strings
};

struct option_group {
  takes kind;
  std::string_view names;  ///< long names without "--"; "?" after one: "" and "None" are None
};

/// Every option of `vllm serve` at 48ebd6f2 (extracted from EngineArgs.add_cli_args, FrontendArgs
/// and make_arg_parser), and the four that older command lines carry and vLLM now refuses:
/// --swap-space (#36216), --disable-log-requests (#35723), --cuda-graph-sizes (#30396),
/// --max-seq-len-to-capture (#25543).
inline constexpr option_group option_groups[] = {
    {takes::flag,
     "trust-remote-code allow-deprecated-quantization enforce-eager enable-return-routed-experts "
     "use-fp64-gumbel disable-sliding-window disable-cascade-attn skip-tokenizer-init "
     "enable-prompt-embeds enable-sleep-mode enable-cumem-allocator use-tqdm-on-load "
     "enable-mamba-cache-stochastic-rounding numa-bind data-parallel-hybrid-lb "
     "data-parallel-external-lb enable-expert-parallel enable-ep-weight-filter enable-dbo "
     "enable-elastic-ep disable-nccl-for-dp-synchronization enable-eplb ray-workers-use-nsight "
     "disable-custom-all-reduce enable-fault-tolerance enable-prefix-caching calculate-kv-scales "
     "kv-sharing-fast-prefill use-replayssm language-model-only enable-mm-embeds mm-encoder-only "
     "interleave-mm-strings skip-mm-profiling enable-lora enable-tower-connector-lora "
     "fully-sharded-loras specialize-active-lora enable-mixed-moe-lora-format "
     "enable-moe-shared-loras kv-cache-metrics cudagraph-metrics enable-layerwise-nvtx-tracing "
     "enable-mfu-metrics enable-logging-iteration-details jit-monitor-verbose "
     "enable-chunked-prefill disable-chunked-mm-input scheduler-reserve-full-isl "
     "disable-hybrid-kv-cache-manager async-scheduling enable-flashinfer-autotune "
     "enable-bf16x3-router-gemm fail-on-environ-validation enable-log-requests "
     "trust-request-chat-template return-tokens-as-token-ids enable-auto-tool-choice "
     "exclude-tools-when-tool-choice-none enable-prompt-tokens-details enable-per-request-metrics "
     "enable-server-load-tracking enable-force-include-usage enable-tokenizer-info-endpoint "
     "enable-log-outputs enable-log-deltas log-error-stack tokens-only disable-uvicorn-access-log "
     "allow-credentials enable-ssl-refresh enable-request-id-headers disable-fastapi-docs "
     "enable-offline-docs enable-flash-late-interaction"},
    {takes::store_true,
     "data-parallel-multi-port-external-lb disable-log-stats aggregate-engine-logging headless "
     "grpc "
     "disable-log-requests"},
    {takes::maybe, "hf-token"},
    {takes::integer,
     "seed max-logprobs renderer-num-workers safetensors-prefetch-num-threads "
     "mamba-cache-philox-rounds pipeline-parallel-size master-port nnodes node-rank "
     "distributed-timeout-seconds? cpu-distributed-timeout-seconds? tensor-parallel-size "
     "decode-context-parallel-size dcp-kv-cache-interleave-size cp-kv-cache-interleave-size "
     "prefill-context-parallel-size data-parallel-size data-parallel-rank? "
     "data-parallel-start-rank? data-parallel-size-local? data-parallel-rpc-port? ubatch-size "
     "dbo-decode-token-threshold dbo-prefill-token-threshold max-parallel-loading-workers? "
     "block-size? num-gpu-blocks-override? mamba-block-size? prefix-match-unit? "
     "replayssm-buffer-len offload-group-size offload-num-in-group offload-prefetch-step "
     "mm-shm-cache-max-object-size-mb max-loras max-lora-rank max-cpu-loras? max-num-seqs? "
     "long-prefill-token-threshold prefill-schedule-interval stream-interval "
     "max-cudagraph-capture-size? spec-tokens? shutdown-timeout max-log-len? port "
     "data-parallel-supervisor-port dp-supervisor-probe-failure-threshold ssl-cert-reqs "
     "h11-max-incomplete-event-size h11-max-header-count api-server-count? "
     "max-seq-len-to-capture"},
    {takes::human,
     "max-model-len safetensors-prefetch-block-size kv-cache-memory-bytes? "
     "max-num-batched-tokens? max-num-scheduled-tokens?"},
    {takes::real,
     "gpu-memory-utilization kv-offloading-size? cpu-offload-gb mm-processor-cache-gb "
     "mm-encoder-fp8-scale-save-margin video-pruning-rate? mm-ipc-gpu-memory-gb "
     "kv-cache-metrics-sample watermark dp-supervisor-probe-interval-s "
     "dp-supervisor-probe-timeout-s swap-space"},
    {takes::json,
     "quantization-config? model-class-overrides pooler-config? override-generation-config "
     "model-loader-extra-config eplb-config fault-tolerance-config limit-mm-per-prompt "
     "media-io-kwargs mm-processor-kwargs? default-mm-loras? ir-op-priority speculative-config? "
     "diffusion-config? kv-transfer-config? kv-events-config? ec-transfer-config? "
     "compilation-config attention-config reasoning-config kernel-config additional-config "
     "structured-outputs-config profiler-config weight-transfer-config? "
     "default-chat-template-kwargs?"},
    {takes::json_or_text, "hf-overrides pt-load-map-location"},
    {takes::list,
     "allowed-media-domains served-model-name logits-processors ignore-patterns numa-bind-nodes "
     "numa-bind-cpus device-ids kv-cache-dtype-skip-layers cpu-offload-params offload-params "
     "lora-target-modules collect-detailed-traces cudagraph-capture-sizes lora-modules api-key "
     "cuda-graph-sizes"},
    {takes::text,
     "model runner convert tokenizer? tokenizer-mode dtype hf-config-path? "
     "allowed-local-media-path revision? code-revision? tokenizer-revision? quantization? "
     "logprobs-mode config-format generation-config model-impl override-attention-dtype? "
     "io-processor-plugin? load-format download-dir? safetensors-load-strategy? "
     "attention-backend? mamba-backend reasoning-parser reasoning-parser-plugin? "
     "distributed-executor-backend? master-addr dcp-comm-backend data-parallel-address? "
     "data-parallel-backend all2all-backend expert-placement-strategy worker-cls "
     "worker-extension-cls kv-cache-dtype prefix-caching-hash-algo mamba-cache-dtype "
     "mamba-ssm-cache-dtype mamba-cache-mode kv-offloading-backend offload-backend "
     "mm-processor-cache-type? mm-encoder-tp-mode mm-encoder-attn-backend? mm-encoder-attn-dtype? "
     "mm-encoder-fp8-scale-path? mm-encoder-fp8-scale-save-path? mm-tensor-ipc lora-dtype? "
     "show-hidden-metrics-for-version? otlp-traces-endpoint? jit-monitor-mode scheduling-policy "
     "scheduler-cls? moe-backend linear-backend spec-method? spec-model? optimization-level "
     "performance-mode gdn-prefill-backend? chat-template? chat-template-content-format "
     "response-role tool-call-parser? tool-parser-plugin tool-server? log-config-file? "
     "fingerprint-mode fingerprint-value? host? uds? uvicorn-log-level "
     "disable-access-log-for-endpoints? allowed-origins allowed-methods allowed-headers "
     "ssl-keyfile? ssl-certfile? ssl-ca-certs? ssl-ciphers? root-path? middleware config?"},
};

/// The single-dash aliases (arg_utils.py add_cli_args, cli_args.py make_arg_parser).
inline constexpr std::pair<std::string_view, std::string_view> short_aliases[] = {
    {"q", "quantization"},
    {"pp", "pipeline-parallel-size"},
    {"n", "nnodes"},
    {"r", "node-rank"},
    {"tp", "tensor-parallel-size"},
    {"dcp", "decode-context-parallel-size"},
    {"pcp", "prefill-context-parallel-size"},
    {"dp", "data-parallel-size"},
    {"dpn", "data-parallel-rank"},
    {"dpr", "data-parallel-start-rank"},
    {"dpl", "data-parallel-size-local"},
    {"dpa", "data-parallel-address"},
    {"dpp", "data-parallel-rpc-port"},
    {"dpb", "data-parallel-backend"},
    {"dph", "data-parallel-hybrid-lb"},
    {"dpe", "data-parallel-external-lb"},
    {"dpm", "data-parallel-multi-port-external-lb"},
    {"ep", "enable-expert-parallel"},
    {"sc", "speculative-config"},
    {"dc", "diffusion-config"},
    {"cc", "compilation-config"},
    {"ac", "attention-config"},
    {"asc", "api-server-count"},
};

struct option {
  std::string name;  ///< the long name without "--"
  takes kind;
  bool none_ok;  ///< optional_type: "" and "None" are None
};

/// The options by long name.
inline const std::map<std::string, option, std::less<>>& options() {
  static const std::map<std::string, option, std::less<>> table = [] {
    std::map<std::string, option, std::less<>> t;
    for (const option_group& g : option_groups)
      for (std::size_t at = 0; at < g.names.size();) {
        const std::size_t end = std::min(g.names.find(' ', at), g.names.size());
        std::string name(g.names.substr(at, end - at));
        const bool none_ok = name.ends_with('?');
        if (none_ok) name.pop_back();
        t.emplace(name, option{name, g.kind, none_ok});
        at = end + 1;
      }
    return t;
  }();
  return table;
}

/// A word argparse takes as an option rather than a value: "-x", not "-1" or "-0.5".
inline bool option_like(std::string_view word) {
  if (word.size() < 2 || word.front() != '-') return false;
  const std::size_t digits = word.find_first_not_of("0123456789.", 1);
  return digits != std::string_view::npos;
}

/// A long option as argparse's _parse_optional finds it: the exact name, a --no- form of a flag,
/// else the one option the name begins (allow_abbrev). Null: vLLM does not know it.
inline const option* long_option(const std::string& name, bool& negated, const std::string& what) {
  const auto& t = options();
  negated = false;
  if (const auto it = t.find(name); it != t.end()) return &it->second;
  if (name.starts_with("no-"))
    if (const auto it = t.find(name.substr(3)); it != t.end() && it->second.kind == takes::flag) {
      negated = true;
      return &it->second;
    }
  std::vector<std::pair<const option*, bool>> found;
  std::string list;
  for (const auto& [key, o] : t) {
    for (const bool no : {false, true}) {
      if (no && o.kind != takes::flag) continue;
      const std::string spelled = (no ? "no-" : "") + key;
      if (!spelled.starts_with(name)) continue;
      found.emplace_back(&o, no);
      list += (list.empty() ? "--" : ", --") + spelled;
    }
  }
  if (found.size() > 1)
    detail::raise(what + ": ambiguous option: --" + name + " could match " + list +
                  " (vLLM's argparse): spell it out");
  if (found.empty()) return nullptr;
  negated = found.front().second;
  return found.front().first;
}

inline bool digit(char c) {
  return c >= '0' && c <= '9';
}

/// Python's int() of a word: optional spaces and sign, digits with single "_" between them.
inline std::optional<std::int64_t> python_int(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  std::string digits;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '_' && i > 0 && i + 1 < text.size() && digit(text[i - 1]) && digit(text[i + 1]))
      continue;
    digits += text[i];
  }
  if (!digits.empty() && digits.front() == '+') digits.erase(0, 1);
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
    return std::nullopt;
  return n;
}

/// argparse_utils.py human_readable_int: "25.6k" = 25600 (k m g t: powers of 1000), "1K" = 1024
/// (K M G T: powers of 1024, whole numbers only), else int().
inline std::int64_t human_int(const std::string& word, const std::string& what) {
  std::string_view text = word;
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  const std::string_view suffixes = "kmgtKMGT";
  if (text.size() >= 2 && suffixes.find(text.back()) != std::string_view::npos) {
    const std::string number(text.substr(0, text.size() - 1));
    const std::size_t kind = suffixes.find(text.back());
    const bool decimal = number.find_first_not_of("0123456789.") == std::string::npos &&
                         digit(number.front()) && digit(number.back()) &&
                         number.find('.') == number.rfind('.');
    if (decimal) {
      const double scale = std::pow(kind < 4 ? 1000.0 : 1024.0, static_cast<double>(kind % 4 + 1));
      if (kind >= 4 && number.find('.') != std::string::npos)
        detail::raise(what + ": Decimals are not allowed with binary suffixes like " +
                      std::string(1, text.back()) + ". Did you mean to use " + number +
                      static_cast<char>(text.back() - 'A' + 'a') + " instead? (vLLM)");
      const double value = std::stod(number) * scale;
      if (value < 0x1p62) return static_cast<std::int64_t>(value);
    }
  }
  if (const auto n = python_int(text)) return *n;
  detail::raise(what + ": invalid human_readable_int value: '" + shown_value(word) + "' (vLLM)");
}

/// A word as the option's argparse type converts it.
inline nlohmann::json typed(const option& o, const std::string& word, const std::string& what) {
  const std::string where = what + ": --" + o.name;
  if (o.none_ok && (word.empty() || word == "None")) return nullptr;  // optional_type
  switch (o.kind) {
    case takes::integer:
      if (const auto n = python_int(word)) return *n;
      detail::raise(where + ": invalid int value: '" + shown_value(word) + "' (vLLM)");
    case takes::human:  // max_model_len: human_readable_int_or_auto, -1 or "auto" for -1
      if (o.name == "max-model-len" && (word == "-1" || same_name(word, "auto")))
        return std::int64_t{-1};
      return human_int(word, where);
    case takes::real: {
      const char* begin = word.c_str();
      char* end = nullptr;
      const double x = std::strtod(begin, &end);
      if (word.empty() || end != begin + word.size())
        detail::raise(where + ": invalid float value: '" + shown_value(word) + "' (vLLM)");
      return x;
    }
    case takes::json_or_text: {
      const std::size_t first = word.find_first_not_of(" \t\n"),
                        last = word.find_last_not_of(" \t\n");
      if (first == std::string::npos || word[first] != '{' || word[last] != '}') return word;
      [[fallthrough]];
    }
    case takes::json:
      if (!nlohmann::json::accept(word))
        detail::raise(where + " takes JSON (vLLM's json.loads), got '" + shown_value(word) + "'");
      return detail::parse_config(word, where);
    default:
      return word;
  }
}

/// The words a `--config` YAML file stands for (argparse_utils.py load_config_file): "--key
/// value"; true is the bare flag, false nothing, a list its items, a mapping one JSON word, any
/// other value Python's str() of it (null is "None").
inline std::vector<std::string> config_words(const std::string& path, const std::string& what) {
  const std::string_view extension = std::string_view(path).substr(path.rfind('.') + 1);
  if (path.find('.') == std::string::npos || (extension != "yaml" && extension != "yml"))
    detail::raise(what + ": --config: Config file must be of a yaml/yml type. " +
                  std::string(extension) + " supplied (vLLM)");
  const std::string source = what + ": --config " + detail::quoted_path(path);
  const nlohmann::json document = read_launcher_document(path, "yaml", source);
  if (!document.is_object())
    detail::raise(source + " must hold a mapping of options, got " + detail::shown(document));
  const auto str = [](const nlohmann::json& v) {  // Python's str() of a YAML value
    if (v.is_string()) return v.get<std::string>();
    if (v.is_null()) return std::string("None");
    if (v.is_boolean()) return std::string(v.get<bool>() ? "True" : "False");
    return json_text(v);
  };
  std::vector<std::string> words;
  for (const auto& [key, value] : document.items()) {
    if (value.is_boolean()) {
      if (value.get<bool>()) words.push_back("--" + key);
    } else if (value.is_array()) {
      if (value.empty()) continue;
      words.push_back("--" + key);
      for (const auto& item : value) words.push_back(str(item));
    } else {
      words.push_back("--" + key);
      words.push_back(value.is_object() ? json_text(value) : str(value));
    }
  }
  return words;
}

/// The words with `--model X` moved to the front and `--config FILE`'s words put after the model
/// (parse_args, _pull_args_from_config: command line over file over defaults).
inline std::vector<std::string> expanded_words(std::vector<std::string> words,
                                               const std::string& what) {
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i] != "--model" && !(words[i].starts_with("--model=") && words[i].size() > 8))
      continue;
    if (words[i] == "--model" && i + 1 >= words.size())
      detail::raise(what + ": --model needs a value");
    const std::string model = words[i] == "--model" ? words[i + 1] : words[i].substr(8);
    words.erase(words.begin() + static_cast<std::ptrdiff_t>(i),
                words.begin() + static_cast<std::ptrdiff_t>(i + (words[i] == "--model" ? 2 : 1)));
    words.insert(words.begin(), model);
    break;
  }
  std::size_t at = words.size();
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i].starts_with("--config="))
      detail::raise(what +
                    ": give --config FILE as two words: vLLM reads the file only then "
                    "(argparse_utils.py parse_args), and ignores " +
                    shown_value(words[i]));
    if (words[i] != "--config") continue;
    if (at != words.size()) detail::raise(what + ": More than one config file specified! (vLLM)");
    at = i;
  }
  if (at == words.size()) return words;
  if (at + 1 >= words.size())
    detail::raise(what +
                  ": No config file specified! Please check your command-line arguments. "
                  "(vLLM)");
  const std::vector<std::string> from_file = config_words(words[at + 1], what);
  const bool model_first = !words.empty() && !words.front().starts_with("-");
  bool model_in_file = false;
  for (const std::string& w : from_file) model_in_file = model_in_file || w == "--model";
  if (!model_first && !model_in_file)
    detail::raise(what +
                  ": No model specified! Please specify model either as a positional "
                  "argument or in a config file. (vLLM)");
  std::vector<std::string> out(words.begin(), words.begin() + (model_first ? 1 : 0));
  out.insert(out.end(), from_file.begin(), from_file.end());
  out.insert(out.end(), words.begin() + (model_first ? 1 : 0),
             words.begin() + static_cast<std::ptrdiff_t>(at));
  out.insert(out.end(), words.begin() + static_cast<std::ptrdiff_t>(at + 2), words.end());
  return out;
}

/// A dotted argument's value (parse_args): JSON, else a human-readable integer, else the text.
inline nlohmann::json dotted_value(const std::string& text, const std::string& what) {
  if (nlohmann::json::accept(text)) return detail::parse_config(text, what);
  try {
    return human_int(text, what);
  } catch (const vramfit::error&) {
    return text;
  }
}

}  // namespace detail_vllm

/// `vllm serve`'s words (after the subcommand) as one JSON object keyed by vLLM's dest names
/// (tensor_parallel_size; the positional model as "model"). An option vLLM does not know keeps
/// its words, under its name, for the listing of what vramfit does not know.
inline nlohmann::json read_vllm_arguments(const std::vector<std::string>& given,
                                          const std::string& what) {
  using namespace detail_vllm;
  const std::vector<std::string> expanded = expanded_words(given, what);
  // Names: "_" as "-" up to the first "." (parse_args' pattern (?<=--)[^\.]*); -O3, -O=3 and
  // -O 3 as --optimization-level.
  std::vector<std::string> words;
  for (std::size_t i = 0; i < expanded.size(); ++i) {
    const std::string& w = expanded[i];
    if (w.starts_with("--")) {
      std::string name = w.substr(0, w.find('='));
      for (std::size_t c = 2; c < name.size() && name[c] != '.'; ++c)
        if (name[c] == '_') name[c] = '-';
      words.push_back(name + w.substr(name.size()));
    } else if (w.starts_with("-O") && w != "-O") {
      words.insert(words.end(), {"--optimization-level", w.substr(w[2] == '=' ? 3 : 2)});
    } else if (w == "-O" && i + 1 < expanded.size() && expanded[i + 1].size() == 1 &&
               expanded[i + 1][0] >= '0' && expanded[i + 1][0] <= '3') {
      words.emplace_back("--optimization-level");
    } else {
      words.push_back(w);
    }
  }
  // Dotted arguments (--compilation-config.cudagraph_mode NONE, -cc.mode=3, --x.k+ a,b): one
  // JSON object per spelled option, appended last as if given whole.
  std::vector<std::pair<std::string, nlohmann::json>> dotted;
  std::vector<std::string> plain;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    const std::string name = w.substr(0, w.find('='));
    if (!option_like(w) || name.find('.') == std::string::npos) {
      plain.push_back(w);
      continue;
    }
    std::string value;
    if (name.size() < w.size()) {
      value = w.substr(name.size() + 1);
    } else if (i + 1 < words.size()) {
      value = words[++i];
    } else {
      detail::raise(what + ": " + shown_value(w) + " needs a value");
    }
    std::string path = name;
    nlohmann::json v;
    if (path.ends_with('+')) {  // a list of the comma-separated items
      path.pop_back();
      v = nlohmann::json::array();
      for (std::size_t at = 0; at <= value.size();) {
        const std::size_t end = std::min(value.find(',', at), value.size());
        v.push_back(value.substr(at, end - at));
        at = end + 1;
      }
    } else {
      v = dotted_value(value, what + ": " + name);
    }
    const std::string option = path.substr(0, path.find('.'));
    auto it = dotted.begin();
    while (it != dotted.end() && it->first != option) ++it;
    if (it == dotted.end()) it = dotted.insert(it, {option, nlohmann::json::object()});
    nlohmann::json* at = &it->second;
    for (std::size_t begin = option.size() + 1; begin <= path.size();) {
      const std::size_t end = std::min(path.find('.', begin), path.size());
      nlohmann::json& next = (*at)[path.substr(begin, end - begin)];
      if (end == path.size()) {  // recursive_dict_update: lists extend, others replace
        if (next.is_array() && v.is_array())
          next.insert(next.end(), v.begin(), v.end());
        else if (next.is_object() && v.is_object())
          next.update(v, true);
        else
          next = v;
      } else if (!next.is_object()) {
        next = nlohmann::json::object();
      }
      at = &next;
      begin = end + 1;
    }
  }
  for (const auto& [option, value] : dotted) {
    plain.push_back(option);
    plain.push_back(json_text(value));
  }
  // argparse: each option and its value; the one positional word is the model (serve.py:
  // args.model = args.model_tag).
  nlohmann::json document = nlohmann::json::object();
  std::optional<std::string> positional;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const std::string& w = plain[i];
    if (w == "--")
      detail::raise(what +
                    ": '--' inside vLLM's words: vramfit reads them as vllm serve does, "
                    "without it");
    if (!option_like(w)) {
      if (positional)
        detail::raise(what + ": unrecognized arguments: " + shown_value(w) + " (vLLM)");
      positional = w;
      continue;
    }
    const std::size_t equals = w.find('=');
    const std::string name = w.substr(w.starts_with("--") ? 2 : 1, equals - (w[1] == '-' ? 2 : 1));
    const std::optional<std::string> explicit_value =
        equals == std::string::npos ? std::nullopt : std::optional(w.substr(equals + 1));
    bool negated = false;
    const option* o = nullptr;
    if (w.starts_with("--")) {
      o = long_option(name, negated, what);
    } else {
      for (const auto& [alias, long_name] : short_aliases)
        if (alias == name) o = &options().at(std::string(long_name));
    }
    const auto next_value = [&]() -> std::optional<std::string> {
      if (explicit_value) return explicit_value;
      if (i + 1 < plain.size() && !option_like(plain[i + 1]) && plain[i + 1] != "--")
        return plain[++i];
      return std::nullopt;
    };
    if (!o) {  // not vLLM's: its words kept, for the listing
      std::string key = name;
      for (char& c : key)
        if (c == '-') c = '_';
      const auto value = next_value();
      document[key] = value ? nlohmann::json(*value) : nlohmann::json(true);
      continue;
    }
    std::string key = o->name;
    for (char& c : key)
      if (c == '-') c = '_';
    const std::string shown = what + ": " + w.substr(0, equals);
    if (o->kind == takes::flag || o->kind == takes::store_true) {
      if (explicit_value)
        detail::raise(shown + ": ignored explicit argument '" + shown_value(*explicit_value) +
                      "' (vLLM's booleans are --" + o->name +
                      (o->kind == takes::flag ? " and --no-" + o->name : "") + ")");
      document[key] = !negated;
    } else if (o->kind == takes::maybe) {
      const auto value = next_value();
      document[key] = value ? nlohmann::json(*value) : nlohmann::json(true);
    } else if (o->kind == takes::list) {
      nlohmann::json items = nlohmann::json::array();
      if (explicit_value) items.push_back(*explicit_value);
      while (!explicit_value && i + 1 < plain.size() && !option_like(plain[i + 1]))
        items.push_back(plain[++i]);
      if (items.empty()) detail::raise(shown + ": expected at least one argument (vLLM)");
      document[key] = items;
    } else {
      const auto value = next_value();
      if (!value) detail::raise(shown + ": expected one argument (vLLM)");
      document[key] = typed(*o, *value, what);
    }
  }
  if (positional) document["model"] = *positional;
  return document;
}

namespace detail_vllm {

/// The model's config.json where vramfit can read it (a Hub id in the local cache, a file or a
/// folder), else why not.
struct model_config {
  std::optional<nlohmann::json> json;
  std::string why_not;
};

/// The model (serve.py: the positional word, else --model, else ModelConfig.model
/// "Qwen/Qwen3-0.6B"), its revision (ModelConfig.revision) and --hf-config-path (where
/// config.json is read from) as --model.
inline model_config model(launcher_keys& k) {
  const std::optional<std::string> given = k.text("model");
  const std::optional<std::string> config_path = k.text("hf_config_path");
  const std::optional<std::string> revision = k.text("revision");
  std::string name = config_path.value_or(given.value_or("Qwen/Qwen3-0.6B"));
  const char* key = config_path ? "hf_config_path"
                    : given     ? "model"
                                : "(default: model Qwen/Qwen3-0.6B)";
  const std::optional<std::string> format = k.text("config_format");
  if (format && *format == "mistral")
    k.refuse("config_format", "mistral reads params.json: vramfit reads a config.json");
  if (name.ends_with(".gguf") || name.find("://") != std::string::npos)
    k.refuse(key, "\"" + shown_value(name) +
                      "\": a GGUF file or an object store's path: vramfit reads a config.json");
  if (revision && looks_like_hub_id(name) && name.find('@') == std::string::npos)
    name += "@" + *revision;
  k.set("--model", name, key);  // the revision and the config path were read above
  try {
    if (looks_like_hub_id(name)) return {read_hub_config(name), {}};
    if (is_path(name)) return {read_hf_config(name), {}};
  } catch (const vramfit::error& e) {
    return {std::nullopt, message_of(e)};
  }
  return {std::nullopt, "\"" + shown_value(name) + "\" names no config.json (a vramfit preset?)"};
}

/// The model's own length as ModelConfig._get_and_verify_max_len derives it (model.py; keys from
/// model_arch_config_convertor.py derive_max_model_len_and_key): the smallest length key (a
/// model_max_length wins), 2048 when none, times the RoPE factor but for su, longrope and llama3
/// (yarn from original_max_position_embeddings; Gemma 3's is already scaled).
inline std::pair<std::int64_t, std::string> derived_length(const nlohmann::json& config) {
  const nlohmann::json& text = config.contains("text_config") && config["text_config"].is_object()
                                   ? config["text_config"]
                                   : config;
  double length = HUGE_VAL;
  std::string key;
  for (const char* k :
       {"max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
        "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len"})
    if (text.contains(k) && text[k].is_number() && text[k].get<double>() < length) {
      length = text[k].get<double>();
      key = k;
    }
  if (text.contains("model_max_length") && text["model_max_length"].is_number() &&
      text["model_max_length"].get<double>() > 0) {
    length = text["model_max_length"].get<double>();
    key = "model_max_length";
  }
  if (length == HUGE_VAL) {
    length = 2048;
    key = "none: vLLM's 2048";
  }
  const nlohmann::json* rope = nullptr;
  for (const char* k : {"rope_parameters", "rope_scaling"})
    if (!rope && text.contains(k) && text[k].is_object() && !text[k].empty()) rope = &text[k];
  const std::string type = text.value("model_type", config.value("model_type", ""));
  if (rope && type.find("gemma3") == std::string::npos) {
    std::vector<const nlohmann::json*> each;  // one, or one per layer type
    for (const auto& [name, inner] : rope->items())
      each.push_back(inner.is_object() ? &inner : nullptr);
    if (std::find(each.begin(), each.end(), nullptr) != each.end()) each = {rope};
    double factor = 1;
    for (const nlohmann::json* rp : each) {
      const std::string kind = rp->value("rope_type", rp->value("type", std::string()));
      if (kind == "su" || kind == "longrope" || kind == "llama3") continue;
      if (rp->contains("factor") && (*rp)["factor"].is_number())
        factor = (*rp)["factor"].get<double>();
      if (kind == "yarn" && rp->contains("original_max_position_embeddings") &&
          (*rp)["original_max_position_embeddings"].is_number())
        length = (*rp)["original_max_position_embeddings"].get<double>();
    }
    if (factor != 1) key += " x rope factor";
    length *= factor;
  }
  return {static_cast<std::int64_t>(length), key};
}

/// gpu_memory_utilization (CacheConfig, cache.py: Field(default=0.92, gt=0, le=1); 0.9 before
/// vLLM 0.21, #38284) as --utilization in whole percents.
inline void utilization(launcher_keys& k) {
  const auto u = k.number("gpu_memory_utilization");
  if (!u) {
    k.set("--utilization", "92", "(default: gpu_memory_utilization 0.92)");
    return;
  }
  if (!(*u > 0 && *u <= 1))
    k.refuse("gpu_memory_utilization",
             "must be greater than 0 and at most 1 (CacheConfig: gt=0, le=1), got " +
                 nlohmann::json(*u).dump());
  const std::optional<std::int64_t> percent = whole_percent(*u);
  if (!percent)
    k.refuse("gpu_memory_utilization", nlohmann::json(*u).dump() +
                                           " is not a whole percent: vramfit's --utilization takes "
                                           "whole percents (0.92 is 92)");
  k.set("--utilization", std::to_string(*percent), "gpu_memory_utilization");
}

/// max_model_len as --context: vLLM starts only with room for one sequence of it
/// (kv_cache_utils.py check_enough_kv_cache_memory), which --context with --batch 1 checks.
/// Not given: the model's own (model.py _get_and_verify_max_len).
inline std::int64_t context(launcher_keys& k, const model_config& config) {
  const auto given = k.integer("max_model_len", -1, std::int64_t{1} << 40);
  if (given && *given == -1)
    k.refuse("max_model_len",
             "auto (-1) fits the length to the memory left after profiling: vramfit needs a "
             "length: give --max-model-len N");
  if (given && *given == 0) k.refuse("max_model_len", "must be at least 1, got 0");
  if (!config.json) {
    if (given) {
      k.set("--context", std::to_string(*given), "max_model_len");
      return *given;
    }
    k.refuse("max_model_len",
             "is not given, and vLLM takes it from the model's config.json, which vramfit "
             "cannot read (" +
                 config.why_not + "): give --max-model-len N");
  }
  const auto [derived, key] = derived_length(*config.json);
  if (given && *given > derived)
    k.refuse("max_model_len", "User-specified max_model_len (" + std::to_string(*given) +
                                  ") is greater than the derived max_model_len (" + key + "=" +
                                  std::to_string(derived) +
                                  " in model's config.json) (vLLM; "
                                  "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 allows it)");
  const std::int64_t length = given.value_or(derived);
  k.set("--context", std::to_string(length),
        given ? "max_model_len" : "(derived: max_model_len from config.json " + key + ")");
  return length;
}

/// block_size (CacheConfig.DEFAULT_BLOCK_SIZE 16, --framework vllm's) and kv_cache_dtype
/// (CacheConfig.cache_dtype "auto": the model's dtype, torch_utils.py kv_cache_dtype_str_to_dtype).
inline void kv_cache(launcher_keys& k) {
  if (const auto block = k.integer("block_size", 1, std::int64_t{1} << 20))
    k.set("--block", std::to_string(*block), "block_size");
  if (const auto dtype = k.text("kv_cache_dtype")) {
    if (*dtype == "bfloat16")
      k.set("--kv-dtype", "bf16", "kv_cache_dtype");
    else if (*dtype == "float16")
      k.set("--kv-dtype", "fp16", "kv_cache_dtype");
    else if (*dtype == "fp8" || *dtype == "fp8_e4m3" || *dtype == "fp8_e5m2" || *dtype == "fp8_inc")
      k.set("--kv-dtype", "fp8", "kv_cache_dtype");
    else if (*dtype != "auto")
      k.refuse("kv_cache_dtype",
               "\"" + shown_value(*dtype) +
                   "\" has no vramfit KV format (per-token-head scales, nvfp4, turboquant and "
                   "fp8_ds_mla are not modeled; vramfit takes bf16, fp16 and fp8)");
  }
  if (const nlohmann::json* skip = k.find("kv_cache_dtype_skip_layers");
      skip && skip->is_array() && !skip->empty())
    k.refuse("kv_cache_dtype_skip_layers",
             "keeps these layers' KV in the model's dtype: vramfit gives all layers one format");
  for (const char* key : {"kv_cache_memory_bytes", "num_gpu_blocks_override"})
    if (k.find(key))
      k.refuse(key,
               "fixes the KV pool (gpu_worker.py determine_available_memory): vramfit sizes "
               "it from --utilization");
}

/// A quantization method (vLLM's name: QuantizationMethods, model.py _verify_quantization) as
/// vramfit's weight format, or "" when vramfit has none.
inline std::string weight_format(std::string method, const nlohmann::json* config) {
  if (method.ends_with("_marlin")) method.resize(method.size() - 7);
  if (method.starts_with("auto_")) method.erase(0, 5);
  if (method == "fp8" || method == "fp8_per_tensor" || method == "fp8_per_block" ||
      method == "modelopt")
    return "fp8";
  if (method == "fp8_per_channel") return "fp8-per-channel";
  if (method == "awq" || method == "gptq") return method;
  if (method == "mxfp4" || method == "gpt_oss_mxfp4") return "mxfp4";
  if (method == "modelopt_fp4" || method == "nvfp4_per_token") return "nvfp4";
  if (method == "bitsandbytes") {  // bitsandbytes.py: load_in_4bit, fp4, no double quant
    if (config && config->value("load_in_8bit", false)) return "int8";
    const bool nf4 = config && config->value("bnb_4bit_quant_type", "") == "nf4";
    const bool dq = config && config->value("bnb_4bit_use_double_quant", false);
    return nf4 ? (dq ? "nf4" : "nf4-no-dq") : (dq ? "fp4-dq" : "fp4");
  }
  return "";
}

/// --quantization/-q and --dtype as --weights (model.py _verify_quantization, _resolve_auto_dtype):
/// the config's quantization_config otherwise, which vramfit reads but for ModelOpt's.
inline void weights(launcher_keys& k, const model_config& config) {
  const nlohmann::json* quant = config.json && config.json->contains("quantization_config") &&
                                        (*config.json)["quantization_config"].is_object()
                                    ? &(*config.json)["quantization_config"]
                                    : nullptr;
  const std::string in_config = quant ? quant->value("quant_method", "") : "";
  const std::optional<std::string> method = k.text("quantization");
  if (method) {
    const std::string format = weight_format(*method, quant);
    if (format.empty())
      k.refuse("quantization", "\"" + shown_value(*method) +
                                   "\" has no vramfit weight format (compressed-tensors, quark, "
                                   "torchao, experts_int8, ... are not modeled)");
    if (!in_config.empty() && weight_format(in_config, quant) != format)
      k.refuse("quantization",
               "Quantization method specified in the model config (" + in_config +
                   ") does not match the quantization method specified in the `quantization` "
                   "argument (" +
                   *method + ") (vLLM)");
    k.set("--weights", format, "quantization");
  } else if (in_config == "modelopt") {  // ModelOpt: a quant_method vramfit does not read
    const std::string algo = quant->value("quant_algo", "");
    if (algo == "FP8")
      k.set("--weights", "fp8", "(config.json: quantization_config.quant_algo FP8)");
    else if (algo == "NVFP4")
      k.set("--weights", "nvfp4", "(config.json: quantization_config.quant_algo NVFP4)");
    else
      k.refuse("model", "is a ModelOpt checkpoint of quant_algo \"" + shown_value(algo) +
                            "\": vramfit models FP8 and NVFP4");
  }
  // ModelConfig.dtype, "auto": the weights' format, unless quantized (then not checked here).
  const auto dtype =
      method || quant
          ? k.text("dtype")
          : k.choice("dtype", {"auto", "half", "float16", "bfloat16", "float", "float32"});
  if (dtype && !method && !quant) {
    if (*dtype == "half" || *dtype == "float16")
      k.set("--weights", "fp16", "dtype");
    else if (*dtype == "bfloat16")
      k.set("--weights", "bf16", "dtype");
    else if (*dtype == "float" || *dtype == "float32")
      k.set("--weights", "fp32", "dtype");
  }
  if (k.find("quantization_config"))
    k.refuse("quantization_config",
             "quantizes online, layer by layer: give the result's --weights instead");
}

/// Parallelism (ParallelConfig, parallel.py): TP and PP shard every rank; DP copies the engine,
/// but shards a MoE's experts over DP x TP (fused_moe/config.py).
inline void parallel(launcher_keys& k, const model_config& config) {
  if (const auto tp = k.integer("tensor_parallel_size", 1, 1 << 20))
    k.set("--tp", std::to_string(*tp), "tensor_parallel_size");
  if (const auto pp = k.integer("pipeline_parallel_size", 1, 1 << 20))
    k.set("--pp", std::to_string(*pp), "pipeline_parallel_size");
  const std::int64_t dp = k.integer("data_parallel_size", 1, 1 << 20).value_or(1);
  const nlohmann::json* text = config.json && config.json->contains("text_config")
                                   ? &(*config.json)["text_config"]
                                   : (config.json ? &*config.json : nullptr);
  bool moe = false;
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts"})
    moe = moe || (text && text->is_object() && text->contains(key));
  if (dp > 1 && moe)
    k.refuse("data_parallel_size",
             "> 1 splits a MoE's experts over data x tensor parallel ranks "
             "(fused_moe/config.py): vramfit infer has no data-parallel degree");
  // EP = DP x TP: with DP 1 each rank holds whole experts, the same bytes as TP's shards.
  k.no_effect({"enable_expert_parallel", "enable_ep_weight_filter", "expert_placement_strategy"});
  for (const char* key : {"decode_context_parallel_size", "prefill_context_parallel_size"})
    if (k.integer(key, 1, 1 << 20).value_or(1) > 1)
      k.refuse(key, "> 1 splits the KV cache over context-parallel ranks: not modeled");
  const bool eplb = k.boolean("enable_eplb").value_or(false);
  if (eplb && k.integer("eplb_config.num_redundant_experts", 0, 1 << 20).value_or(0) > 0)
    k.refuse("eplb_config.num_redundant_experts",
             "adds redundant experts' weights to each rank: not modeled");
  k.no_effect({"eplb_config"});
}

/// The profile run's shape (SchedulerConfig; arg_utils.py get_batch_defaults and
/// _set_default_max_num_seqs_and_batched_tokens_args; scheduler.py's checks).
inline void profile_run(launcher_keys& k, std::int64_t length) {
  const auto tokens = k.integer("max_num_batched_tokens", 1, std::int64_t{1} << 40);
  const auto seqs = k.integer("max_num_seqs", 1, std::int64_t{1} << 40);
  const std::optional<bool> chunked = k.boolean("enable_chunked_prefill");
  if (tokens) k.set("--max-num-batched-tokens", std::to_string(*tokens), "max_num_batched_tokens");
  if (seqs) k.set("--max-num-seqs", std::to_string(*seqs), "max_num_seqs");
  if (tokens && seqs && *tokens < *seqs)
    k.refuse("max_num_batched_tokens", "max_num_batched_tokens (" + std::to_string(*tokens) +
                                           ") must be greater than or equal to max_num_seqs (" +
                                           std::to_string(*seqs) + "). (vLLM)");
  if (chunked == false && tokens && *tokens < length)
    k.refuse("max_num_batched_tokens",
             "max_num_batched_tokens (" + std::to_string(*tokens) +
                 ") is smaller than max_model_len (" + std::to_string(length) +
                 ") with chunked prefill off: vLLM rejects longer sequences; increase "
                 "max_num_batched_tokens or decrease max_model_len (vLLM)");
  // Defaults of 8192 or 2048 tokens and 1024 or 256 sequences, by GPU (vramfit's too); these
  // adjustments give the same whichever applies.
  if (chunked == false && !tokens && length >= 8192) {
    k.set("--max-num-batched-tokens", std::to_string(length),
          "(derived: enable_chunked_prefill false: max_num_batched_tokens max_model_len)");
  } else if (chunked == false && !tokens) {
    k.unmodeled("enable_chunked_prefill",
                "off, the profile run takes max(max_model_len, the GPU's default) tokens: give "
                "--max-num-batched-tokens");
  } else if (!tokens && seqs && *seqs * length <= 2048) {
    k.set("--max-num-batched-tokens", std::to_string(*seqs * length),
          "(derived: max_num_batched_tokens max_num_seqs x max_model_len)");
  }
  if (tokens && !seqs && *tokens < 256)
    k.set("--max-num-seqs", std::to_string(*tokens),
          "(derived: max_num_seqs at most max_num_batched_tokens)");
  const auto mode = k.choice("performance_mode", {"balanced", "interactivity", "throughput"});
  if (mode == "throughput" && (!tokens || !seqs))  // VllmConfig's default: balanced
    k.unmodeled("performance_mode",
                "throughput doubles the profile run's default tokens and sequences: give "
                "--max-num-batched-tokens and --max-num-seqs");
}

/// CUDA graphs: estimated and subtracted from the pool since vLLM 0.21 (gpu_worker.py
/// determine_available_memory, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS); none with
/// --enforce-eager, -O0 or cudagraph_mode NONE (vllm.py).
inline void cuda_graphs(launcher_keys& k) {
  const bool eager = k.boolean("enforce_eager").value_or(false);
  const auto level = k.choice("optimization_level", {"0", "1", "2", "3"});
  const nlohmann::json* mode = k.find("compilation_config.cudagraph_mode");
  if (eager)
    k.set("--cuda-graphs", "0", "enforce_eager");
  else if (level == "0")
    k.set("--cuda-graphs", "0", "optimization_level");
  else if (mode && mode->is_string() && *mode == "NONE")
    k.set("--cuda-graphs", "0", "compilation_config.cudagraph_mode");
  else  // vramfit's --cuda-graphs 0 stands: said, not hidden as the file's option
    k.unmodeled_default("(default: CUDA graphs captured)",
                        "vLLM subtracts their estimated memory from the pool; give --cuda-graphs "
                        "MiB from its log's \"Estimated CUDA graph memory\"");
  for (const char* key : {"cudagraph_capture_sizes", "max_cudagraph_capture_size"})
    k.unmodeled(key, "the captured sizes set the CUDA graphs' memory: give --cuda-graphs MiB");
  if (mode && !(mode->is_string() && *mode == "NONE"))
    k.unmodeled("compilation_config.cudagraph_mode",
                "the graphs' memory: give --cuda-graphs MiB from vLLM's log");
}

/// Flags that change what vramfit cannot express: refused where they move the KV pool or the
/// weights, listed where they add buffers.
inline void not_modeled(launcher_keys& k) {
  if (k.number("cpu_offload_gb").value_or(0) > 0)
    k.refuse("cpu_offload_gb", "keeps that many GiB of weights in CPU memory: not modeled");
  const nlohmann::json* params = k.find("offload_params");
  if (k.integer("offload_group_size", 0, 1 << 30).value_or(0) > 0 ||
      (params && params->is_array() && !params->empty()))
    k.refuse("offload_group_size", "prefetch offload moves weights to the CPU: not modeled");
  const nlohmann::json* cpu_params = k.find("cpu_offload_params");
  if (cpu_params && cpu_params->is_array() && !cpu_params->empty())
    k.refuse("cpu_offload_params", "keeps these weights in CPU memory: not modeled");
  k.no_effect({"offload_backend", "offload_num_in_group", "offload_prefetch_step"});
  for (const char* key : {"speculative_config", "spec_method", "spec_model", "spec_tokens"})
    if (k.find(key))
      k.refuse(key, "speculative decoding adds a draft model's weights and KV: not modeled");
  if (k.boolean("enable_lora").value_or(false))
    k.refuse("enable_lora", "GPU LoRA slots: not modeled");
  k.no_effect({"max_loras", "max_lora_rank", "max_cpu_loras", "fully_sharded_loras", "lora_dtype",
               "lora_target_modules", "enable_tower_connector_lora", "specialize_active_lora",
               "enable_mixed_moe_lora_format", "enable_moe_shared_loras", "default_mm_loras",
               "lora_modules"});  // with LoRA off (refused above), none holds memory
  if (const nlohmann::json* o = k.find("hf_overrides"); o && !(o->is_object() && o->empty()))
    k.refuse("hf_overrides", "changes the model's config.json: give the changed config as -m");
  if (const auto runner = k.text("runner"); runner == "pooling")
    k.refuse("runner", "pooling: vramfit's serving budget sizes a text decoder's KV cache");
  if (const auto convert = k.text("convert"); convert && *convert != "auto" && *convert != "none")
    k.refuse("convert", "\"" + shown_value(*convert) + "\" makes a pooling model: not modeled");
  k.unmodeled("pooler_config", "a pooling model's head: not modeled");
  k.unmodeled("disable_sliding_window",
              "caps the length to the window and keeps full-length KV: not modeled");
  k.unmodeled("mm_ipc_gpu_memory_gb",
              "carved out of the KV pool (gpu_worker.py): add it to --non-torch MiB");
  for (const char* key : {"kv_transfer_config", "ec_transfer_config"})
    k.unmodeled(key, "a connector's transfer buffers and staging memory: not modeled");
  k.unmodeled("use_fp64_gumbel", "fp64 sampling noise raises the sampler's peak: not modeled");
  for (const char* key :
       {"limit_mm_per_prompt", "skip_mm_profiling", "mm_encoder_tp_mode", "mm_processor_kwargs",
        "language_model_only", "mm_encoder_only", "mm_encoder_attn_backend",
        "mm_encoder_attn_dtype", "mm_encoder_fp8_scale_path", "mm_encoder_fp8_scale_save_path",
        "mm_encoder_fp8_scale_save_margin"})
    k.unmodeled(key, "the multimodal encoder's profiling: vramfit sizes a text decoder");
  for (const char* key : {"enable_dbo",
                          "ubatch_size",
                          "all2all_backend",
                          "disable_custom_all_reduce",
                          "moe_backend",
                          "linear_backend",
                          "attention_backend",
                          "attention_config",
                          "kernel_config",
                          "enable_return_routed_experts",
                          "override_attention_dtype",
                          "mamba_backend",
                          "mamba_cache_dtype",
                          "mamba_ssm_cache_dtype",
                          "mamba_cache_mode",
                          "mamba_block_size",
                          "enable_mamba_cache_stochastic_rounding",
                          "mamba_cache_philox_rounds",
                          "use_replayssm",
                          "replayssm_buffer_len",
                          "diffusion_config"})
    k.unmodeled(key,
                "kernels' buffers and workspaces (what --non-torch stands for), or layers "
                "vramfit does not read");
}

/// Options that change no GPU memory, by kind: read, and listed as such.
inline constexpr std::string_view no_effect_groups[] = {
    // No GPU memory: the request logging and CPU swap older command lines carry, which vLLM now
    // refuses (#35723, #36216, #30396, #25543).
    "disable_log_requests swap_space cuda_graph_sizes max_seq_len_to_capture",
    // CPU-side KV tiers, prefix caching (no change to the pool or to one sequence), the hybrid
    // manager (vramfit sizes every layer at full context) and logprobs.
    "kv_offloading_size kv_offloading_backend enable_prefix_caching prefix_caching_hash_algo "
    "prefix_match_unit disable_hybrid_kv_cache_manager max_logprobs calculate_kv_scales",
    // Frontend, HTTP and serve's own (cli_args.py FrontendArgs, make_arg_parser).
    "host port uds uvicorn_log_level disable_uvicorn_access_log "
    "disable_access_log_for_endpoints allow_credentials allowed_origins allowed_methods "
    "allowed_headers api_key ssl_keyfile ssl_certfile ssl_ca_certs enable_ssl_refresh "
    "ssl_cert_reqs ssl_ciphers root_path middleware enable_request_id_headers "
    "disable_fastapi_docs enable_offline_docs enable_flash_late_interaction "
    "data_parallel_supervisor_port dp_supervisor_probe_interval_s "
    "dp_supervisor_probe_timeout_s dp_supervisor_probe_failure_threshold "
    "h11_max_incomplete_event_size h11_max_header_count chat_template "
    "chat_template_content_format trust_request_chat_template default_chat_template_kwargs "
    "response_role return_tokens_as_token_ids enable_auto_tool_choice "
    "exclude_tools_when_tool_choice_none tool_call_parser tool_parser_plugin tool_server "
    "log_config_file max_log_len enable_prompt_tokens_details enable_per_request_metrics "
    "enable_server_load_tracking enable_force_include_usage enable_tokenizer_info_endpoint "
    "enable_log_outputs enable_log_deltas log_error_stack tokens_only fingerprint_mode "
    "fingerprint_value headless api_server_count grpc config",
    // Tokenizer, model source and loading.
    "tokenizer tokenizer_mode tokenizer_revision skip_tokenizer_init trust_remote_code "
    "code_revision download_dir load_format safetensors_load_strategy "
    "safetensors_prefetch_num_threads safetensors_prefetch_block_size "
    "model_loader_extra_config ignore_patterns use_tqdm_on_load pt_load_map_location "
    "max_parallel_loading_workers hf_token served_model_name allow_deprecated_quantization "
    "model_impl model_class_overrides",
    // Generation, sampling and parsing.
    "seed generation_config override_generation_config logprobs_mode logits_processors "
    "io_processor_plugin renderer_num_workers reasoning_parser reasoning_parser_plugin "
    "reasoning_config structured_outputs_config enable_prompt_embeds disable_cascade_attn "
    "allowed_local_media_path allowed_media_domains media_io_kwargs mm_processor_cache_gb "
    "mm_processor_cache_type mm_shm_cache_max_object_size_mb interleave_mm_strings "
    "video_pruning_rate mm_tensor_ipc enable_mm_embeds",
    // Scheduling: the pool is the same.
    "max_num_scheduled_tokens long_prefill_token_threshold scheduling_policy "
    "disable_chunked_mm_input scheduler_cls scheduler_reserve_full_isl watermark "
    "prefill_schedule_interval async_scheduling stream_interval kv_sharing_fast_prefill",
    // Distributed plumbing.
    "distributed_executor_backend master_addr master_port nnodes node_rank "
    "distributed_timeout_seconds cpu_distributed_timeout_seconds numa_bind numa_bind_nodes "
    "numa_bind_cpus device_ids data_parallel_rank data_parallel_start_rank "
    "data_parallel_size_local data_parallel_address data_parallel_rpc_port "
    "data_parallel_backend data_parallel_hybrid_lb data_parallel_external_lb "
    "data_parallel_multi_port_external_lb disable_nccl_for_dp_synchronization "
    "enable_elastic_ep dbo_decode_token_threshold dbo_prefill_token_threshold "
    "dcp_kv_cache_interleave_size cp_kv_cache_interleave_size dcp_comm_backend "
    "ray_workers_use_nsight worker_cls worker_extension_cls enable_fault_tolerance "
    "fault_tolerance_config weight_transfer_config kv_events_config",
    // Observability and lifecycle.
    "disable_log_stats aggregate_engine_logging enable_log_requests "
    "show_hidden_metrics_for_version otlp_traces_endpoint collect_detailed_traces "
    "kv_cache_metrics kv_cache_metrics_sample cudagraph_metrics enable_layerwise_nvtx_tracing "
    "enable_mfu_metrics enable_logging_iteration_details jit_monitor_mode jit_monitor_verbose "
    "profiler_config fail_on_environ_validation shutdown_timeout enable_sleep_mode "
    "enable_cumem_allocator additional_config gdn_prefill_backend ir_op_priority "
    "enable_flashinfer_autotune enable_bf16x3_router_gemm",
};

}  // namespace detail_vllm

/// The options `vllm serve`'s words set, and the words that change no memory or are not modeled.
inline void translate_vllm(launcher_keys& k) {
  using namespace detail_vllm;
  const model_config config = model(k);
  parallel(k, config);
  utilization(k);
  const std::int64_t length = context(k, config);
  kv_cache(k);
  weights(k, config);
  profile_run(k, length);
  cuda_graphs(k);
  not_modeled(k);
  for (const std::string_view names : no_effect_groups)
    for (std::size_t at = 0; at < names.size();) {
      const std::size_t end = std::min(names.find(' ', at), names.size());
      k.no_effect({names.substr(at, end - at)});
      at = end + 1;
    }
}

}  // namespace vramfit::cli
