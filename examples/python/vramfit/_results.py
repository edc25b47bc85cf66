"""What a command returns: the tool's JSON, as a frozen dataclass that is also a read-only
mapping whose keys are attributes, with the figures a launcher asks for (peak, fits, breakdown)
where it holds them, and a small table for notebooks (_repr_markdown_, _repr_html_)."""

import dataclasses
import functools
import html
import json
import shlex
from collections.abc import Mapping
from typing import Any, Tuple

from . import _vramfit
from ._cli import run_or_raise

# vramfit::fit_report's fields in its order (include/vramfit/fit.hpp): the numbers of the
# compile error, and of DoesNotFit's message.
FIT_REPORT = ("required", "available", "weights", "gradients", "optimizer_states",
              "master_weights", "activations", "kv_cache", "buffers", "overhead")
COMPONENTS = FIT_REPORT[2:]


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Result(Mapping):
    """The tool's JSON for one command. `to_json()` is its standard output byte for byte;
    `command` the shell command that prints it. Mapping equality (dict(r) == other) is kept:
    eq=False, so that the dataclass does not compare its private fields instead."""

    argv: Tuple[str, ...]  # ("vramfit", subcommand, options...)
    _text: str
    _json: Any

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

    @property
    def peak(self):
        """Bytes per GPU at the peak; --explain lists saved tensors and has none."""
        raise AttributeError("peak")  # __getattr__ then lists the keys there are

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

    # Notebooks: the parts and the verdict as a small table, sizes as the tool's tables write them.
    def _table(self):
        """(title, header, rows of cells, verdict) for the notebook views; None without a peak."""
        return None

    def _repr_markdown_(self):
        table = self._table()
        if table is None:
            return None  # the notebook shows repr()
        title, header, rows, verdict = table
        escaped = [[_markdown_cell(c) for c in row] for row in [header, *rows]]
        lines = [f"**{_markdown_cell(title)}**", "",
                 "| " + " | ".join(escaped[0]) + " |",
                 "|---" + "|---:" * (len(header) - 1) + "|",
                 *("| " + " | ".join(row) + " |" for row in escaped[1:]), "",
                 _markdown_cell(verdict)]
        return "\n".join(lines) + "\n"

    def _repr_html_(self):
        table = self._table()
        if table is None:
            return None
        title, header, rows, verdict = table
        right = ' style="text-align:right"'  # the sizes, as the tool's tables align them
        cells = "".join(f"<th>{html.escape(str(c))}</th>" for c in header)
        body = "".join(
            "<tr>" + "".join(f"<td{right if i else ''}>{html.escape(str(c))}</td>"
                             for i, c in enumerate(row)) + "</tr>"
            for row in rows)
        return (f"<table><caption>{html.escape(title)}</caption><thead><tr>{cells}</tr></thead>"
                f"<tbody>{body}</tbody></table><p>{html.escape(verdict)}</p>")

    def _title(self):
        return str(self._json.get("configuration", self.command))


def size_text(size):
    """Bytes as the tool's tables write them (its default --units): "44.47 GiB"."""
    return _vramfit.size_text(size)


def _markdown_cell(text):
    """Text in a Markdown table cell: a | or a newline would break the row, and & and < would
    start an entity or a tag ("->" stays as the tool writes it)."""
    escaped = str(text).replace("&", "&amp;").replace("<", "&lt;")
    return escaped.replace("|", "\\|").replace("\n", " ")


def _fit_verdict(device, required, available):
    """The tool's verdict line (sizes.hpp fit_verdict): "H100: fits, X free"."""
    if required <= available:
        return f"{device}: fits, {size_text(available - required)} free"
    return f"{device}: does not fit, {size_text(required - available)} over"


class Estimate(Result):
    """train, infer and min-gpus: the most loaded GPU's peak and what it holds."""

    @property
    def peak(self):
        """Bytes per GPU at the peak (memory.total, the figure --metric chooses: the compile
        error's `required`), which the verdict compares with the GPU's capacity."""
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

    def _table(self):
        parts = self.get("at_peak", self["memory"])  # at the peak: they add up to it
        rows = [(c, size_text(parts[c])) for c in COMPONENTS if parts.get(c)]
        rows.append(("total (peak)", size_text(self.peak)))
        return (self._title(), ("component", "at peak"), rows,
                _fit_verdict(self["device"]["name"], self.peak, self.capacity))


# The serving table's labels (infer_command.hpp run_serving).
_SERVING_LABELS = {"weights": "weights", "profile_peak": "profile run peak",
                   "non_torch": "non-torch", "cuda_graphs": "CUDA graphs", "kv_pool": "KV pool"}


class Serving(Result):
    """infer with utilization=: vLLM's KV pool. `peak` is the pool's requirement, the JSON's
    `requested`: gpu_memory_utilization x the total memory cudaMemGetInfo reports, which vLLM
    takes on the GPU and fills with the weights, the profile run's peak, non-torch memory, the
    CUDA graphs and the KV pool (`breakdown`). The verdict, `fits`, is whether that pool holds
    `batch` sequences of the context (`sequences` of them fit)."""

    @property
    def peak(self):
        return self["requested"]

    @property
    def capacity(self):
        return self["device"]["capacity"]

    @property
    def breakdown(self):
        """What fills the requested bytes, in vLLM's order; the KV pool is what is left."""
        return {k: self[k] for k in ("weights", "profile_peak", "non_torch", "cuda_graphs",
                                     "kv_pool")}

    def _table(self):
        rows = [(_SERVING_LABELS[k], size_text(v)) for k, v in self.breakdown.items()]
        rows.append(("requested (peak)", size_text(self.peak)))
        # the batch and the context are the title's (the tool's verdict line names the batch)
        verdict = (f"{self['device']['name']}: a KV pool of {self['sequences']:,} sequences "
                   f"-> {'fits' if self.fits else 'does not fit'}")
        return self._title(), ("part", "bytes"), rows, verdict


class Sweep(Result):
    """train with sweep=: the peak at each value swept (`peaks`); `peak` is the largest of
    them. No single verdict: each point has its own `fits`."""

    @property
    def swept(self):
        """The option swept, as the JSON names it ("micro-batch")."""
        return next(k for k in self["sweep"][0] if k not in ("fits", "total"))

    @property
    def peaks(self):
        """{value swept: bytes per GPU at the peak}."""
        return {point[self.swept]: point["total"] for point in self["sweep"]}

    @property
    def peak(self):
        return max(point["total"] for point in self["sweep"])

    def _table(self):
        rows = [(point[self.swept], size_text(point["total"]),
                 "fits" if point["fits"] else "does not fit") for point in self["sweep"]]
        fitting = [point[self.swept] for point in self["sweep"] if point["fits"]]
        verdict = (f"{self['device']['name']}: {len(fitting)} of {len(rows)} fit" +
                   (f", up to {self.swept} {max(fitting)}" if fitting else ""))
        return self._title(), (self.swept, "peak", "verdict"), rows, verdict


class Load(Result):
    """load: the peak while the weights are loaded."""

    @property
    def peak(self):
        """Bytes per GPU at the peak of loading (the JSON's total)."""
        return self["total"]

    @property
    def capacity(self):
        return self["device"]["capacity"]

    @property
    def breakdown(self):
        return {k: self[k] for k in ("weights", "transient", "overhead")}

    def report(self):
        return {"required": self.peak, "available": self.capacity, **self.breakdown}

    def _table(self):
        rows = [(k, size_text(v)) for k, v in self.breakdown.items()]
        rows.append(("total (peak)", size_text(self.peak)))
        return (self._title(), ("part", "bytes"), rows,
                _fit_verdict(self["device"]["name"], self.peak, self.capacity))


class Plan(Result):
    """plan: the ranked layouts; the figures are those of the first, `best`, or None when no
    layout fits."""

    @property
    def fits(self):
        return self["chosen"] is not None

    @property
    def peak(self):
        """The best layout's bytes per GPU at the peak (chosen.required); None when none fits."""
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

    def _table(self):
        rows = [(" ".join(_layout_words(c["argv"])), size_text(c["required"]))
                for c in self.get("candidates", [])]
        device = self["device"]["name"]
        verdict = (_fit_verdict(device, self.peak, self.capacity).replace(": ", ": the best ", 1)
                   if self.fits else f"{device}: no layout fits")
        return self._title(), ("layout", "peak"), rows, verdict


def _layout_words(argv):
    """A plan candidate's train arguments (the tool's argv: "--option value" or "--flag")
    without the model and the GPU, which every candidate shares."""
    words, shown = list(argv[2:]), []
    while words:
        word = words.pop(0)
        value = words.pop(0) if words and not words[0].startswith("--") else None
        if word not in ("--model", "--gpu"):
            shown.append(word if value is None else f"{word} {value}")
    return shown


def result_of(args, text):
    """The result class that reads the JSON `vramfit ARGS...` printed."""
    parsed = json.loads(text)
    argv = ("vramfit", *args)
    if args[0] == "plan":
        return Plan(argv, text, parsed)
    if args[0] == "load":
        return Load(argv, text, parsed)
    if isinstance(parsed, dict) and "memory" in parsed:
        return Estimate(argv, text, parsed)
    if isinstance(parsed, dict) and "kv_pool" in parsed:
        return Serving(argv, text, parsed)
    if isinstance(parsed, dict) and parsed.get("sweep"):
        return Sweep(argv, text, parsed)
    return Result(argv, text, parsed)
