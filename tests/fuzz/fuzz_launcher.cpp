// libFuzzer target: --from's readers. The first byte picks a kind of launcher file (DeepSpeed,
// torchtitan, torchtune, hf-trainer, accelerate, or vLLM's arguments one per line), the rest is
// its text: parsed, then translated. Any input must end in options or a vramfit::error: never a
// crash, a sanitizer report, an uncaught exception or a hang.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "from_option.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace vramfit::cli;
  if (size == 0) return 0;
  const launcher_kind& kind = launcher_kinds[data[0] % std::size(launcher_kinds)];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    nlohmann::json document;
    if (kind.read_arguments) {
      std::vector<std::string> words;
      for (std::size_t at = 0; at <= text.size();) {
        const std::size_t end = std::min(text.find('\n', at), text.size());
        words.push_back(text.substr(at, end - at));
        at = end + 1;
      }
      document = kind.read_arguments(words, "fuzz");
    } else {
      document = parse_launcher_document(text, kind.format, "fuzz");
    }
    launcher_keys keys(std::move(document), launcher_reading{kind.name, "fuzz", {}, {}, {}, {}},
                       kind.auto_ok);
    kind.translate(keys);
    (void)std::move(keys).finish();
  } catch (const vramfit::error&) {
    // A one-line refusal is the right answer to a bad file.
  }
  return 0;
}
