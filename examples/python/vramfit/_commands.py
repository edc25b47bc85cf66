"""The subcommands as functions of keyword arguments: `vramfit train --micro-batch 2` is
vramfit.train(micro_batch=2). Each reads the tool's JSON; its signature and docstring come from
the tool's option table (_signature.py)."""

from typing import Union

from ._cli import run_or_raise
from ._fit import DoesNotFit
from ._options import argv
from ._results import Estimate, Load, Plan, Result, Serving, Sweep, result_of
from ._signature import docstring, signature


def _command(subcommand, function, returns, returned):
    def run(**options):
        args = argv(subcommand, options, function)
        done = run_or_raise(args)
        result = result_of(args, done.out)
        if done.status == 1:  # --check, and it does not fit
            raise DoesNotFit(result)
        return result

    run.__name__ = run.__qualname__ = function
    run.__signature__ = signature(subcommand, returns)
    run.__annotations__ = {p.name: p.annotation for p in run.__signature__.parameters.values()}
    run.__annotations__["return"] = returns
    run.__doc__ = docstring(subcommand, function, returned)
    return run


train = _command("train", "train", Union[Estimate, Sweep, Result],
                 "Estimate\n    The most loaded GPU's peak (.peak) and what it holds; with "
                 "sweep=, a Sweep;\n    with explain=True, a Result (the saved tensors).")
infer = _command("infer", "infer", Union[Estimate, Serving],
                 "Estimate\n    One request's peak on the most loaded GPU; with utilization=, "
                 "a Serving\n    (vLLM's KV pool: .peak is the bytes it requests).")
min_gpus = _command("min-gpus", "min_gpus", Estimate,
                    "Estimate\n    With min_gpus and data_parallel: the fewest GPUs that fit.")
load = _command("load", "load", Load, "Load\n    The peak while the weights are loaded.")
plan = _command("plan", "plan", Plan,
                "Plan\n    The ranked layouts; .peak and .best are the first one's.")
