// SPDX-License-Identifier: MIT
// vramfit: the command-line face of the library. It evaluates the same constexpr formulas at run
// time, from a preset or a Hugging Face config.json. Bad input: one message on stderr, exit 2.
// "Does not fit": exit 1, only with --check. The tool itself is tool.hpp.
#include <iostream>
#include <string>
#include <vector>

#include "tool.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

/// The tool on the process's streams; main() is a call of it, and the option-parsing fuzzer
/// calls it too.
int vramfit_cli_main(int argc, char** argv) {
  const std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + (argc > 0 ? argc : 0));
  vramfit::cli::tool tool;
  return tool.run(args, std::cout, std::cerr);
}

#ifndef VRAMFIT_CLI_NO_MAIN
int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // Each estimate and each search replays the allocator in buffers of its own, up to tens of
  // megabytes on an MoE model (a search reuses them from candidate to candidate: replay_scratch):
  // keep freed heap mapped rather than handing it back to the kernel and faulting it in again for
  // the next one. The library itself leaves the heap's policy to its host.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  return vramfit_cli_main(argc, argv);
}
#endif
