"""What a command returns: the tool's JSON, as a read-only mapping whose keys are also
attributes, with the figures a launcher asks for (peak, fits, breakdown) where it holds them."""

import functools
import json
import shlex
from collections.abc import Mapping

from ._cli import run_or_raise

# vramfit::fit_report's fields in its order (include/vramfit/fit.hpp): the numbers of the
# compile error, and of DoesNotFit's message.
FIT_REPORT = ("required", "available", "weights", "gradients", "optimizer_states",
              "master_weights", "activations", "kv_cache", "buffers", "overhead")
COMPONENTS = FIT_REPORT[2:]


class Result(Mapping):
    """The tool's JSON for one command. `to_json()` is its standard output byte for byte;
    `command` the shell command that prints it."""

    def __init__(self, args, text, parsed):
        self.argv = ("vramfit", *args)
        self._text = text
        self._json = parsed

    def to_json(self):
        """The tool's output, byte for byte (with its final newline)."""
        return self._text

    @property
    def command(self):
        return shlex.join(self.argv)

    @property
    def fits(self):
        if "fits" not in self._json:  # --explain, --sweep: no single verdict
            raise AttributeError("fits")  # __getattr__ then lists the keys there are
        return bool(self["fits"])

    def __getitem__(self, key):
        return self._json[key]

    def __iter__(self):
        return iter(self._json)

    def __len__(self):
        return len(self._json)

    def __getattr__(self, name):
        if name.startswith("_"):  # not a key; and _json itself while unpickling
            raise AttributeError(name)
        if name in self._json:
            return self._json[name]
        raise AttributeError(f"{type(self).__name__} has no {name!r}; its keys: "
                             f"{', '.join(self._json)}")

    def __repr__(self):
        return f"<vramfit.{type(self).__name__}: {self._json.get('configuration', self.command)}>"


class Estimate(Result):
    """train, infer and min-gpus: the most loaded GPU's peak and what it holds."""

    @property
    def peak(self):
        """Bytes per GPU at the peak (memory.total: the compile error's `required`)."""
        return self["memory"]["total"]

    @property
    def capacity(self):
        return self["device"]["capacity"]

    @property
    def breakdown(self):
        """Bytes per component: fit_report's eight, 0 where one does not apply."""
        return {c: self["memory"].get(c, 0) for c in COMPONENTS}

    def report(self):
        """The compile error's fit_report, field by field."""
        return {"required": self.peak, "available": self.capacity, **self.breakdown}


class Load(Result):
    """load: the peak while the weights are loaded."""

    @property
    def peak(self):
        return self["total"]

    @property
    def capacity(self):
        return self["device"]["capacity"]

    @property
    def breakdown(self):
        return {k: self[k] for k in ("weights", "transient", "overhead")}

    def report(self):
        return {"required": self.peak, "available": self.capacity, **self.breakdown}


class Plan(Result):
    """plan: the ranked layouts; the figures are those of the first, `best`, or None when no
    layout fits."""

    @property
    def fits(self):
        return self["chosen"] is not None

    @property
    def peak(self):
        return self["chosen"]["required"] if self.fits else None

    @property
    def capacity(self):
        return self["device"]["capacity"]

    @functools.cached_property
    def best(self):
        """The first layout as `train` estimates it, from the arguments the plan gives for it."""
        if not self.fits:
            return None
        args = [*self["chosen"]["argv"][1:], "--format=json"]
        return result_of(args, run_or_raise(args).out)

    @property
    def breakdown(self):
        return self.best.breakdown if self.fits else None


def result_of(args, text):
    """The result class that reads the JSON `vramfit ARGS...` printed."""
    parsed = json.loads(text)
    if args[0] == "plan":
        return Plan(args, text, parsed)
    if args[0] == "load":
        return Load(args, text, parsed)
    if isinstance(parsed, dict) and "memory" in parsed:
        return Estimate(args, text, parsed)
    return Result(args, text, parsed)
