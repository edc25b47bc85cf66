"""Typed functions and results: each function's signature is its subcommand's options as --help
lists them (read here from the binary's help text, not the option table the package reads),
annotated by kind; the docstring carries each option's help; every result has .peak and a
notebook table whose sizes are the tool's table's."""

import dataclasses
import inspect
import json
import os
import pickle
import re
import typing
import unittest
from typing import List, Literal, Optional, Tuple, Union

import vramfit
from support import run_cli

FUNCTIONS = {"train": vramfit.train, "infer": vramfit.infer, "plan": vramfit.plan,
             "min-gpus": vramfit.min_gpus, "load": vramfit.load}
# An option line of CLI11's help: "  -m,--model TEXT=llama-3-8b  A preset ...": the name and
# type in a column of 30 characters, the description after it, or on the next line when they fill
# the column.
OPTION_LINE = re.compile(r"^  (?:-\w,)?--([a-z0-9-]+)")
COLUMN = 30


def help_options(subcommand):
    """[(option, description)] of `vramfit SUBCOMMAND --help`, in its order."""
    status, out, err = run_cli([subcommand, "--help"])
    assert status == 0, err
    lines, listed = out.splitlines(), []
    for i, line in enumerate(lines):
        match = OPTION_LINE.match(line)
        if match:
            # CLI11 moves a description under a name column too wide for it, and never wraps one
            fits = i + 1 == len(lines) or not lines[i + 1].startswith(" " * COLUMN)
            description = line[COLUMN:] if fits else lines[i + 1]
            listed.append((match.group(1), description.strip()))
    return [(name, text) for name, text in listed if name not in ("help", "format")]


def keyword(option):
    return "from_" if option == "from" else option.replace("-", "_")


def cli_json(*words):
    status, out, err = run_cli([*words, "--format", "json"])
    assert status in (0, 1), err
    return json.loads(out)


def table_line(words, label):
    """The size on the line of `vramfit WORDS` (its table) that starts with `label`."""
    _, out, _ = run_cli(words)
    line = next(l for l in out.splitlines() if l.strip().startswith(label))
    return re.search(r"[0-9.]+ [KMGT]?i?B\b", line[line.index(label) + len(label):]).group(0)


class Signatures(unittest.TestCase):
    def test_parameters_are_the_options_of_help(self):
        for subcommand, function in FUNCTIONS.items():
            with self.subTest(subcommand=subcommand):
                options = help_options(subcommand)
                self.assertGreater(len(options), 3)
                parameters = inspect.signature(function).parameters
                self.assertEqual(list(parameters), [keyword(o) for o, _ in options])
                for p in parameters.values():
                    self.assertIs(p.kind, inspect.Parameter.KEYWORD_ONLY)
                    self.assertIsNone(p.default)

    def test_annotations_by_kind(self):
        hints = typing.get_type_hints(vramfit.train)
        expected = {
            "qlora": Optional[bool],  # a flag
            "micro_batch": Optional[int],  # INT:POSITIVE
            "dropout": Optional[float],  # FLOAT
            "lora_targets": Optional[str],  # TEXT, free-form
            # TEXT with choices: "Pipeline schedule: 1f1b, interleaved or gpipe"
            "schedule": Optional[Literal["1f1b", "interleaved", "gpipe"]],
            "offload_to": Optional[Literal["cpu", "nvme"]],
            "metric": Optional[Literal["nvidia-smi", "reserved", "allocated"]],
            "pp_stages": Optional[Union[int, List[int]]],  # repeatable INT
            "model": Optional[Union[str, os.PathLike, vramfit.Model]],  # presets, paths, Models
            "gpu": Optional[str],  # presets and sizes ("96GiB")
            "from_": Optional[Tuple[str, Union[str, os.PathLike, List[str]]]],
        }
        for name, annotation in expected.items():
            with self.subTest(keyword=name):
                self.assertEqual(hints[name], annotation)
        self.assertEqual(typing.get_type_hints(vramfit.load)["return"], vramfit.Load)
        self.assertEqual(typing.get_type_hints(vramfit.infer)["return"],
                         Union[vramfit.Estimate, vramfit.Serving])

    def test_signature_reads_as_python(self):
        shown = str(inspect.signature(vramfit.train))
        self.assertTrue(shown.startswith("(*, model: "), shown)
        self.assertIn("micro_batch: Optional[int] = None", shown)
        self.assertIn("qlora: Optional[bool] = None", shown)
        # the signature binds what the function takes, and refuses what it does not
        inspect.signature(vramfit.train).bind(micro_batch=2, schedule="gpipe")
        with self.assertRaises(TypeError):
            inspect.signature(vramfit.train).bind(gpus=8)

    def test_docstring_lists_each_option_with_its_help(self):
        for subcommand, function in FUNCTIONS.items():
            doc = function.__doc__
            for option, description in help_options(subcommand):
                with self.subTest(subcommand=subcommand, option=option):
                    entry = re.search(rf"^{keyword(option)} : .*\n    (.*)$", doc, re.MULTILINE)
                    self.assertIsNotNone(entry, f"{keyword(option)} is not in the docstring")
                    self.assertIn(description.rstrip("."), entry.group(1))
        entry = re.search(r"^schedule : (.*)\n    (.*)$", vramfit.train.__doc__, re.MULTILINE)
        self.assertEqual(entry.group(1), "{'1f1b', 'interleaved', 'gpipe'}, optional")
        self.assertIn("The tool's default: 1f1b.", entry.group(2))
        self.assertTrue(vramfit.train.__doc__.startswith("Memory per GPU of a training step"))


class Peaks(unittest.TestCase):
    def test_serving_peak_is_the_pools_request(self):
        expected = cli_json("infer", "--model", "llama-3-8b", "--utilization", "90")
        r = vramfit.infer(model="llama-3-8b", utilization=90)
        self.assertIsInstance(r, vramfit.Serving)
        self.assertEqual(r.peak, expected["requested"])
        # vLLM: requested = gpu_memory_utilization x the total cudaMemGetInfo reports, floored
        self.assertEqual(r.peak, expected["device"]["cuda_total"] * 90 // 100)
        # the weights, the profile run, non-torch memory and graphs, and the KV pool fill it
        self.assertEqual(sum(r.breakdown.values()), r.peak)
        self.assertEqual(r.fits, expected["sequences"] >= 1)  # --batch 1
        self.assertFalse(vramfit.infer(model="llama-3-8b", utilization=90, batch=10**6).fits)

    def test_every_result_has_a_peak(self):
        sweep = vramfit.train(model="gpt2", sweep="micro-batch", sweep_max=4)
        totals = [p["total"] for p in cli_json("train", "--model", "gpt2", "--sweep",
                                               "micro-batch", "--sweep-max", "4")["sweep"]]
        self.assertEqual(sweep.peak, max(totals))
        self.assertEqual(list(sweep.peaks.values()), totals)
        self.assertEqual(list(sweep.peaks), [1, 2, 4])
        self.assertEqual(vramfit.load(model="gpt2").peak, cli_json("load", "--model",
                                                                     "gpt2")["total"])
        self.assertEqual(vramfit.plan(model="gpt2", gpus=2).peak,
                         cli_json("plan", "--model", "gpt2", "--gpus", "2")["chosen"]["required"])
        with self.assertRaisesRegex(AttributeError, "has no 'peak'; its keys: "):
            vramfit.train(model="gpt2", explain=True).peak  # noqa: B018: saved tensors only


class Dataclasses(unittest.TestCase):
    def test_frozen_and_still_a_mapping(self):
        r = vramfit.train(model="gpt2")
        self.assertTrue(dataclasses.is_dataclass(r))
        self.assertEqual([f.name for f in dataclasses.fields(r)][0], "argv")
        with self.assertRaises(dataclasses.FrozenInstanceError):
            r.argv = ("vramfit",)
        expected = cli_json("train", "--model", "gpt2")
        self.assertEqual(dict(r), expected)
        self.assertEqual(r["memory"], expected["memory"])
        self.assertEqual(pickle.loads(pickle.dumps(r)).to_json(), r.to_json())


class Notebook(unittest.TestCase):
    CASES = [  # (command, the table's line whose size is the peak, result keywords)
        ("train --model llama-3-8b --gpu h100 --fsdp full --dp 8", "total (peak)",
         {"model": "llama-3-8b", "gpu": "h100", "fsdp": "full", "dp": 8}),
        ("infer --model llama-3-8b --utilization 90", "requested",
         {"model": "llama-3-8b", "utilization": 90}),
        ("load --model llama-3-8b", "| total |", {"model": "llama-3-8b"}),
        ("plan --model gpt2 --gpus 2", "| 1 |", {"model": "gpt2", "gpus": 2}),  # the best's
        ("train --model gpt2 --sweep micro-batch --sweep-max 4", "micro-batch 4:",  # the largest
         {"model": "gpt2", "sweep": "micro-batch", "sweep_max": 4}),
    ]

    def test_tables_show_the_peak_as_the_tool_writes_it(self):
        for command, label, keywords in self.CASES:
            with self.subTest(command=command):
                words = command.split()
                peak = table_line(words, label)
                r = FUNCTIONS[words[0]](**keywords)
                for shown in (r._repr_html_(), r._repr_markdown_()):
                    self.assertIn(peak, shown)
                    self.assertIn("fits", shown)
                self.assertIn(f"<td style=\"text-align:right\">{peak}</td>", r._repr_html_())

    def test_verdict_says_how_much_is_over(self):
        r = vramfit.train(model="llama-3-70b", gpu="h100")
        over = r.peak - r.capacity  # the tool's "does not fit, X over": its peak less capacity
        self.assertGreater(over, 0)
        self.assertIn(f"does not fit, {vramfit._results.size_text(over)} over",
                      r._repr_markdown_())

    def test_names_are_escaped(self):
        with open("tests/data/hf/qwen2.5-0.5b.json", encoding="utf-8") as f:
            config = json.load(f)
        model = vramfit.Model.from_hf_config(config, name="<b>x & y|z")
        r = vramfit.infer(model=model)
        self.assertIn("&lt;b&gt;x &amp; y|z", r._repr_html_())
        self.assertNotIn("<b>", r._repr_html_())
        self.assertIn("&lt;b>x &amp; y\\|z", r._repr_markdown_())
        self.assertNotIn("<b>", r._repr_markdown_())

    def test_a_result_without_a_peak_has_no_table(self):
        r = vramfit.train(model="gpt2", explain=True)
        self.assertIsNone(r._repr_html_())
        self.assertIsNone(r._repr_markdown_())


class Package(unittest.TestCase):
    def test_marked_typed(self):
        self.assertTrue(os.path.isfile(os.path.join(os.path.dirname(vramfit.__file__),
                                                    "py.typed")))


if __name__ == "__main__":
    unittest.main()
