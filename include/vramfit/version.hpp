// SPDX-License-Identifier: MIT
// The one place for vramfit's version; CMakeLists.txt reads these three lines.
#pragma once

#define VRAMFIT_VERSION_MAJOR 0
#define VRAMFIT_VERSION_MINOR 1
#define VRAMFIT_VERSION_PATCH 0

#define VRAMFIT_DETAIL_STRINGIFY(x) #x
#define VRAMFIT_DETAIL_VERSION(major, minor, patch) \
  VRAMFIT_DETAIL_STRINGIFY(major)                   \
  "." VRAMFIT_DETAIL_STRINGIFY(minor) "." VRAMFIT_DETAIL_STRINGIFY(patch)

namespace vramfit {
/// The library version, "major.minor.patch".
inline constexpr char version[] =
    VRAMFIT_DETAIL_VERSION(VRAMFIT_VERSION_MAJOR, VRAMFIT_VERSION_MINOR, VRAMFIT_VERSION_PATCH);
}  // namespace vramfit
