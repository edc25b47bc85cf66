"""The subcommands as functions of keyword arguments: `vramfit train --micro-batch 2` is
vramfit.train(micro_batch=2). Each reads the tool's JSON; its docstring is the tool's help."""

from . import _vramfit
from ._cli import run_or_raise
from ._fit import DoesNotFit
from ._options import argv
from ._results import result_of


def _command(subcommand, function, returns):
    def run(**options):
        args = argv(subcommand, options, function)
        done = run_or_raise(args)
        result = result_of(args, done.out)
        if done.status == 1:  # --check, and it does not fit
            raise DoesNotFit(result)
        return result

    run.__name__ = run.__qualname__ = function
    run.__doc__ = (
        f"`vramfit {subcommand}` with its options as keywords, dashes as underscores "
        f"(--micro-batch: micro_batch=); flags take True or False, repeatable options a list. "
        f"Returns {returns}; check=True raises DoesNotFit where the tool exits 1.\n\n"
        + _vramfit.usage(subcommand))
    return run


train = _command("train", "train", "an Estimate (with sweep= or explain=True: a Result)")
infer = _command("infer", "infer", "an Estimate (with utilization=: a Result)")
min_gpus = _command("min-gpus", "min_gpus", "an Estimate with min_gpus and data_parallel")
load = _command("load", "load", "a Load")
plan = _command("plan", "plan", "a Plan")
