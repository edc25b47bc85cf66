"""What the Python tests share: the command-line tool as a separate process (VRAMFIT_CLI, the
built binary), and a CLI command's words as keyword arguments, converted here independently of
the package so that a wrong conversion in either shows as a difference."""

import os
import re
import shlex
import subprocess

CLI = os.environ["VRAMFIT_CLI"]
ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))

# The one option whose single word holds a list ("8,8,8,8"): the package takes a Python list.
COMMA_LISTS = {"pp_stages"}


def run_cli(words):
    """(status, stdout, stderr) of the tool run as a process from the repository root."""
    done = subprocess.run([CLI, *words], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout, done.stderr


def number_or_text(word):
    if re.fullmatch(r"-?[0-9]+", word):
        return int(word)
    if re.fullmatch(r"-?[0-9]+\.[0-9]+", word):
        return float(word)
    return word


def as_keywords(command):
    """'train --model x --dp 8 --qlora' -> ('train', {'model': 'x', 'dp': 8, 'qlora': True})."""
    words = shlex.split(command)
    subcommand, rest, options = words[0], words[1:], {}
    i = 0
    while i < len(rest):
        assert rest[i].startswith("--"), f"{command}: long options only, got {rest[i]}"
        keyword = rest[i][2:].replace("-", "_")
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value, i = rest[i + 1], i + 2
            value = ([number_or_text(v) for v in value.split(",")] if keyword in COMMA_LISTS
                     else number_or_text(value))
        else:
            value, i = True, i + 1
        if keyword in options:  # a repeated option: a list
            previous = options[keyword]
            options[keyword] = (previous if isinstance(previous, list) else [previous]) + [value]
        else:
            options[keyword] = value
    return subcommand, options
