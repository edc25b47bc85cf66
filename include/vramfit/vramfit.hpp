// SPDX-License-Identifier: MIT
// vramfit: how much GPU memory an LLM training or inference configuration needs, exactly.
// The umbrella header: it includes the topical headers and nothing else.
#pragma once

#include "activations.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "finetune.hpp"
#include "fit.hpp"
#include "gpu.hpp"
#include "inference.hpp"
#include "layout_search.hpp"
#include "ledger.hpp"
#include "model.hpp"
#include "optimizer.hpp"
#include "overheads.hpp"
#include "parallel.hpp"
#include "plan.hpp"
#include "planner.hpp"
#include "precision.hpp"
#include "presets.hpp"
#include "stages.hpp"
#include "step_time.hpp"
#include "tensors.hpp"
#include "timeline.hpp"
#include "training.hpp"
#include "units.hpp"
#include "version.hpp"
