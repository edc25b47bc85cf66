// libFuzzer target: the tool's option parsing and everything after it, from whitespace-separated
// words. Output goes nowhere; any input must end with an exit status, never a crash.
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

int vramfit_cli_main(int argc, char** argv);

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream words(std::string(reinterpret_cast<const char*>(data), size));
  std::vector<std::string> args{"vramfit"};
  for (std::string word; words >> word && args.size() < 32;) args.push_back(word);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::ostringstream sink;
  std::streambuf* out = std::cout.rdbuf(sink.rdbuf());
  std::streambuf* err = std::cerr.rdbuf(sink.rdbuf());
  vramfit_cli_main(static_cast<int>(args.size()), argv.data());  // any exit status is an answer
  std::cout.rdbuf(out);
  std::cerr.rdbuf(err);
  return 0;
}
