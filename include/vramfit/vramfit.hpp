// SPDX-License-Identifier: MIT
// vramfit: how much GPU memory an LLM training or inference configuration needs, exactly.
// The umbrella header: it includes the topical headers and nothing else.
#pragma once

#include "dtype.hpp"
#include "error.hpp"
#include "model.hpp"
#include "presets.hpp"
#include "tensors.hpp"
#include "units.hpp"
#include "version.hpp"
