"""Keyword arguments as the tool's own words: each keyword is an option of the subcommand with
its dashes as underscores (micro_batch= is --micro-batch), read from the tool's parser."""

import difflib
import functools
from keyword import iskeyword
import os
from typing import NamedTuple, Tuple

from . import _vramfit
from ._model import Model

# Options the package sets itself: it reads the tool's JSON, whose numbers are bytes.
_RESERVED = {
    "format": "the package reads the tool's JSON (--format json); vramfit.cli(...) prints its "
    "tables",
}


class Option(NamedTuple):
    """One option of a subcommand as the tool's parser holds it (option_table.hpp)."""

    name: str  # its long name without dashes: "micro-batch"
    kind: str  # "flag", "list" (repeatable) or "value"
    values: Tuple[str, ...]  # what the shell completion offers; empty when free-form
    type: str  # CLI11's type name as --help shows it: "INT:POSITIVE", "TEXT"
    default: str  # the default --help shows; empty when it shows none
    help: str  # the --help text


@functools.lru_cache(maxsize=None)
def option_table(subcommand):
    """{keyword: Option} of a subcommand in the parser's order, without those the package sets."""
    return {
        _keyword(name): Option(name, kind, tuple(values), *rest)
        for name, kind, values, *rest in _vramfit.options(subcommand)
        if name not in _RESERVED
    }


@functools.lru_cache(maxsize=None)
def known_options(subcommand):
    """{keyword: (option, kind, values)} of a subcommand, from the tool's parser."""
    return {keyword: o[:3] for keyword, o in option_table(subcommand).items()}


def _keyword(name):
    """An option's keyword: its dashes as underscores, and a trailing underscore where that is
    one of Python's own words (--from is from_=)."""
    word = name.replace("-", "_")
    return word + "_" if iskeyword(word) else word


def _from_words(value):
    """from_=(kind, file) or, for vLLM, (kind, [its arguments]): the words of --from, which go
    last on the line (vLLM's arguments follow --)."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], str)):
        raise TypeError("from_= takes (kind, file), such as ('deepspeed', 'ds_config.json'), or "
                        f"('vllm', [arguments]), not {value!r:.60}")
    kind, source = value
    if isinstance(source, (list, tuple)):
        return ["--from", kind, "--", *(_word("from_", v) for v in source)]
    return ["--from", kind, _word("from_", source)]


def _word(keyword, value):
    """One value as the tool reads it: numbers exactly (repr of a float round-trips)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same double; nan, inf
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fsdecode(os.fspath(value))
    if isinstance(value, Model):
        return value.argument
    raise TypeError(f"{keyword:.60}= takes a number or a string, not {type(value).__name__}")


def _unknown(function, keyword, known):
    if keyword in _RESERVED:
        return TypeError(f"{function}() does not take {keyword}=: {_RESERVED[keyword]}")
    close = difflib.get_close_matches(keyword, known, n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    shown = keyword if len(keyword) <= 60 else keyword[:60] + "..."
    return TypeError(f"{function}() got an unexpected keyword argument {shown!r}{hint}")


def _given(keyword, option, word):
    """--option=word; an empty word as its own argument, which the tool refuses by name (CLI11
    reads "--option=" as the option without a value, and takes the next word as its value)."""
    try:
        os.fsencode(word)
    except UnicodeEncodeError as e:  # a lone surrogate: no bytes hold it, so no argument can
        raise ValueError(f"{keyword}= (--{option}) {word!r:.60}: {e.reason} at character "
                         f"{e.start}") from None
    return [f"--{option}", ""] if word == "" else [f"--{option}={word}"]


def argv(subcommand, options, function):
    """The words after "vramfit" for `subcommand` with keyword arguments `options`, in the
    order given; None leaves an option out, a flag takes True or False, a repeatable option a
    value or a list of them."""
    known = known_options(subcommand)
    words, last = [subcommand], []
    for keyword, value in options.items():
        if keyword not in known:
            raise _unknown(function, keyword, known)
        if value is None:
            continue
        option, kind, _ = known[keyword]
        if option == "from":
            last = _from_words(value)
        elif kind == "flag":
            if not isinstance(value, bool):
                raise TypeError(f"{keyword}= is a flag (--{option}): True or False, "
                                f"not {value!r:.60}")
            if value:
                words.append(f"--{option}")
        elif kind == "list" and isinstance(value, bool):
            if value:  # the option alone: --dtypes' default list (others refuse it by name)
                words.append(f"--{option}")
        elif kind == "list":
            values = value if isinstance(value, (list, tuple)) else [value]
            for v in values:
                words += _given(keyword, option, _word(keyword, v))
        elif isinstance(value, (list, tuple)):
            raise TypeError(f"{keyword}= (--{option}) takes one value, not a list")
        else:
            words += _given(keyword, option, _word(keyword, value))
    return words + ["--format=json"] + last
