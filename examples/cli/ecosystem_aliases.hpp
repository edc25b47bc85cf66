// SPDX-License-Identifier: MIT
// Other tools' flag names for vramfit's options. Where the meaning is the same, the option takes
// the other name as well (CLI11's names: --max-model-len is --context). Where a value needs
// converting (vLLM's 0.9 is --utilization 90), a hidden option converts it and sets the real one,
// which then counts as given: --help, completion and the Python keywords show only the real one.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vramfit/vramfit.hpp>

#include "choices.hpp"

namespace vramfit::cli {

/// A hidden option and the option it sets.
struct option_alias {
  const char* alias;
  const char* real;
};

inline constexpr option_alias converted_aliases[] = {
    {"--gpu-memory-utilization", "--utilization"},  // infer
    {"--gradient-checkpointing", "--recompute"}};   // train, min-gpus, plan

/// The option a converting alias sets, else `o` itself: so that "the command line gives it"
/// means the same for either name (--from's options given win).
inline const CLI::Option* real_option(const CLI::App& cmd, const CLI::Option* o) {
  if (!o) return o;
  for (const option_alias& a : converted_aliases)
    if (o->check_name(a.alias)) return cmd.get_option_no_throw(a.real);
  return o;
}

/// Whether `name` is a converting alias (plan writes the real option in its place).
inline bool is_converted_alias(std::string_view name) {
  for (const option_alias& a : converted_aliases)
    if (name == a.alias) return true;
  return false;
}

/// A fraction in whole percents (0.9: 90); none when it is not one (0.925).
inline std::optional<std::int64_t> whole_percent(double fraction) {
  const double percent = fraction * 100;
  if (!std::isfinite(percent) || std::abs(percent - std::round(percent)) > 1e-9)
    return std::nullopt;
  return static_cast<std::int64_t>(std::round(percent));
}

/// Gives `real` the value `value` as if from the command line (its checks run, its count is 1),
/// refusing it given too: the two say the same thing twice, or contradict.
inline void set_from_alias(CLI::App& cmd, const option_alias& a, const std::string& value) {
  CLI::Option* real = cmd.get_option(a.real);
  if (real->count() > 0)
    detail::raise(std::string(a.alias) + " sets " + a.real + ": give one of them");
  real->add_result(value);
  real->run_callback();
}

/// --gpu-memory-utilization 0.9 (vLLM's fraction, CacheConfig gt=0, le=1) as --utilization 90.
inline void add_vllm_aliases(CLI::App& cmd) {
  static constexpr const option_alias& a = converted_aliases[0];  // no capture needed
  cmd.add_option(
         a.alias,
         [&cmd](const CLI::results_t& r) {
           if (r.size() > 1) detail::raise(std::string(a.alias) + " is given twice");
           const std::string& word = r.front();
           double u = 0;
           std::size_t used = 0;  // std::stod: libc++ 15 (the browser page's) has no double
           try {                  // from_chars
             u = std::stod(word, &used);
           } catch (const std::logic_error&) {
           }
           const std::optional<std::int64_t> percent = whole_percent(u);
           if (used == 0 || used != word.size() || !(u > 0 && u <= 1) || !percent)
             detail::raise(std::string(a.alias) + " takes vLLM's fraction above 0 and at most 1 " +
                           "in whole percents (0.9 is --utilization 90), got '" +
                           shown_value(word) + "'");
           set_from_alias(cmd, a, std::to_string(*percent));
           return true;
         },
         "")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)  // twice: refused by its name
      ->group("");
}

/// --gradient-checkpointing (Hugging Face TrainingArguments) as --recompute full, non-reentrant
/// as --from hf-trainer reads it (use_reentrant False by default since transformers 5, #43203);
/// --gradient-checkpointing=false as --recompute none.
inline void add_hf_trainer_aliases(CLI::App& cmd) {
  static constexpr const option_alias& a = converted_aliases[1];  // no capture needed
  cmd.add_flag_function(a.alias,
                        [&cmd](std::int64_t on) {
                          set_from_alias(cmd, a, on > 0 ? "full" : "none");
                          CLI::Option* non_reentrant = cmd.get_option("--non-reentrant");
                          if (on > 0 && non_reentrant->count() == 0) {
                            non_reentrant->add_result("true");
                            non_reentrant->run_callback();
                          }
                        })
      ->group("");
}

}  // namespace vramfit::cli
