"""The subcommands' signatures and docstrings, from the tool's option table (option_table.hpp):
each option is a keyword-only parameter, default None (left out: the tool's default applies),
annotated with the type the tool reads and its choices as a Literal; the docstring lists each
option with its --help text, its choices and the tool's default."""

import inspect
import os
from typing import List, Literal, Optional, Tuple, Union

from . import _vramfit
from ._model import Model
from ._options import option_table

# Options whose completion values are presets but not all the tool reads: --model also takes a
# config.json path, its text or a Hugging Face id (and a vramfit.Model); --gpu a size ("96GiB").
_OPEN = {"model": (Union[str, os.PathLike, Model], "str, os.PathLike or Model",
                   "Presets: vramfit.models()."),
         "gpu": (str, "str", "Presets: vramfit.gpus().")}
# --from: (kind, file) or ("vllm", [vLLM's arguments]), as _options._from_words reads it.
_FROM = Tuple[str, Union[str, os.PathLike, List[str]]]
# CLI11's type names ("INT:POSITIVE", "FLOAT", "TEXT:{a,b}"): their first word.
_SCALARS = {"INT": int, "UINT": int, "FLOAT": float}


def _value_type(option):
    """(annotation of one value, how the docstring names it)."""
    if option.name == "from":
        return _FROM, "(kind, file) or ('vllm', [arguments])"
    if option.name in _OPEN:
        return _OPEN[option.name][:2]
    scalar = _SCALARS.get(option.type.split(":", 1)[0].split(" ", 1)[0], str)
    if option.values:
        try:
            choices = tuple(scalar(v) for v in option.values)
        except ValueError:  # a choice that is not a number: the words as they are
            choices = option.values
        return Literal[choices], "{" + ", ".join(repr(c) for c in choices) + "}"
    return scalar, scalar.__name__


def annotation(option):
    """The parameter's annotation: bool for a flag, one value's type, or for a repeatable option
    a value or a list of them; Optional, as None leaves the option out."""
    if option.kind == "flag":
        return Optional[bool], "bool"
    value, shown = _value_type(option)
    if option.kind == "list":
        return Optional[Union[value, List[value]]], f"{shown}, or a list of them"
    return Optional[value], shown


def _entry(keyword, option):
    """One parameter of the docstring, numpydoc's way."""
    _, shown = annotation(option)
    words = [f"--{option.name}" + (" (repeatable)" if option.kind == "list" else "") + ":",
             option.help.rstrip(".") + "."]
    if option.name in _OPEN:
        words.append(_OPEN[option.name][2])  # the choices are the type's {...} otherwise
    if option.default:
        words.append(f"The tool's default: {option.default}.")
    return f"{keyword} : {shown}, optional\n    " + " ".join(words)


def signature(subcommand, returns):
    """The inspect.Signature of the function for `subcommand`, returning `returns`."""
    parameters = [
        inspect.Parameter(keyword, inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=annotation(option)[0])
        for keyword, option in option_table(subcommand).items()
    ]
    return inspect.Signature(parameters, return_annotation=returns)


def docstring(subcommand, function, returns):
    """What help(vramfit.<function>) shows: the subcommand, its parameters, what it returns."""
    entries = "\n".join(_entry(k, o) for k, o in option_table(subcommand).items())
    return (f"{_vramfit.description(subcommand)}: `vramfit {subcommand}` with its options as "
            f"keywords, dashes as underscores (--micro-batch: micro_batch=). None leaves an "
            f"option out (the tool's default applies); flags take True or False, repeatable "
            f"options a value or a list.\n\n"
            f"Parameters\n----------\n{entries}\n\n"
            f"Returns\n-------\n{returns}\n\n"
            f"Raises\n------\nvramfit.Error (a ValueError)\n    A value the tool refuses, with "
            f"its one-line message.\nTypeError\n    A keyword {function}() does not have, or a "
            f"value of the wrong type.\nvramfit.DoesNotFit\n    check=True, where the tool "
            f"exits 1: it does not fit.\n")
