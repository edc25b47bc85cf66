"""vramfit: how much memory each GPU needs to train or serve a large language model, and
whether it fits. The command-line tool run in-process: the same options (dashes as
underscores), the same numbers and the same JSON, byte for byte. See docs/python.md."""

from ._cli import Error, Run, cli
from ._commands import infer, load, min_gpus, plan, train
from ._compare import compare
from ._fit import DoesNotFit, assert_fits
from ._model import Model, frameworks, gpus, models
from ._results import Estimate, Load, Plan, Result, Serving, Sweep
from ._vramfit import version as __version__

__all__ = ["train", "infer", "plan", "min_gpus", "load", "compare", "assert_fits", "DoesNotFit",
           "Error", "Model", "models", "gpus", "frameworks", "cli", "Run", "Result", "Estimate",
           "Serving", "Sweep", "Load", "Plan"]
