"""The command-line tool in-process: one run of `vramfit ARGS...`, and its refusals as Error."""

import os
import signal
import sys
from typing import NamedTuple

from . import _vramfit


class Error(ValueError):
    """Input the tool refuses (it exits 2): the tool's one-line message, without its
    " (see vramfit --help)", which points at the command line."""


class Run(NamedTuple):
    """What `vramfit ARGS...` returned and printed."""

    status: int
    out: str
    err: str


_HELP_HINT = " (see vramfit --help)"


def _word(arg):
    """One argument as the bytes the shell would pass: a str (or path) through os.fsencode, so
    that a file name that is not UTF-8 (os.fsdecode's surrogates) reaches the tool unchanged."""
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, bool) or not isinstance(arg, (str, int, float, os.PathLike)):
        # str() of None, a list or True is no word the tool reads: refused, not passed on
        raise TypeError(f"cli() takes str, bytes, paths and numbers, not {type(arg).__name__}")
    text = os.fspath(arg) if isinstance(arg, os.PathLike) else str(arg)
    try:
        return os.fsencode(text)
    except UnicodeEncodeError as e:  # a lone surrogate, which no bytes hold
        raise ValueError(f"argument {text!r:.60}: {e.reason} at character {e.start}") from None


def cli(*args: str) -> Run:
    """Runs `vramfit ARGS...` in-process, as the shell would: cli('train', '-m', 'llama-3-8b')."""
    return Run(*_vramfit.run([_word(a) for a in args]))


def run_or_raise(args):
    """Runs `vramfit ARGS...`; raises Error with its message when it refuses the input."""
    run = cli(*args)
    if run.status == 2:
        message = run.err.rstrip("\n")
        if message.endswith(_HELP_HINT):
            message = message[: -len(_HELP_HINT)]
        raise Error(message)
    return run


def main():
    """The `vramfit` console script (pyproject.toml): the tool on sys.argv, its output as the
    bytes it wrote, and its exit status."""
    if hasattr(signal, "SIGPIPE"):  # `vramfit ... | head` ends quietly, as the binary does
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    status, out, err = _vramfit.run_bytes([_word(a) for a in sys.argv[1:]])
    for stream, text in ((sys.stdout, out), (sys.stderr, err)):
        stream.flush()
        stream.buffer.write(text)
        stream.buffer.flush()
    sys.exit(status)
