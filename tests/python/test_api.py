"""The package's objects against the tool's JSON: results, models and presets, plans, and
assert_fits against the compile error itself (docs/troubleshooting.md holds g++'s output)."""

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import threading
import unittest

import vramfit
from support import ROOT, run_cli
from vramfit._results import FIT_REPORT


def cli_json(*words):
    status, out, errors = run_cli([*words, "--format", "json"])
    assert status in (0, 1), errors
    return json.loads(out)


class Results(unittest.TestCase):
    def test_estimate_figures_are_the_tools(self):
        expected = cli_json("train", "--model", "llama-3-70b", "--fsdp", "full", "--dp", "8")
        r = vramfit.train(model="llama-3-70b", fsdp="full", dp=8)
        self.assertEqual(r.peak, expected["memory"]["total"])
        self.assertEqual(r.fits, expected["fits"])
        self.assertEqual(r.capacity, expected["device"]["capacity"])
        self.assertEqual(set(r.breakdown), set(expected["at_peak"]))
        for component, size in r.breakdown.items():
            self.assertEqual(size, expected["memory"][component])
        self.assertEqual(dict(r), expected)
        self.assertEqual(r.model, expected["model"])
        self.assertEqual(r["entries"], expected["entries"])
        with self.assertRaisesRegex(AttributeError, "no 'peek'"):
            r.peek  # noqa: B018

    def test_results_without_one_estimate(self):
        for r, kind in ((vramfit.train(model="gpt2", explain=True), vramfit.Result),
                        (vramfit.train(model="gpt2", sweep="micro-batch", sweep_max=4),
                         vramfit.Sweep)):
            self.assertIs(type(r), kind)
            with self.assertRaisesRegex(AttributeError, "has no 'fits'; its keys: "):
                r.fits  # noqa: B018
        self.assertIs(type(vramfit.infer(utilization=90)), vramfit.Serving)

    def test_command_reproduces_the_json(self):
        r = vramfit.infer(model="qwen2.5-7b", weights="awq", batch=4)
        status, out, _ = run_cli(shlex.split(r.command)[1:])
        self.assertEqual((status, out), (0, r.to_json()))

    def test_breakdown_sums_to_the_peak_at_the_peak(self):
        r = vramfit.train(model="llama-3-8b", zero=3, dp=8)
        self.assertEqual(sum(r["at_peak"].values()), r.peak)

    def test_metric_chooses_the_peak_compared(self):
        # The JSON's three peaks; metric= picks the one the verdict and .peak are.
        smi = vramfit.train(model="llama-3-8b", fsdp="full", dp=8)
        memory = smi["memory"]
        self.assertEqual(smi.peak, memory["nvidia_smi"])
        for metric in ("reserved", "allocated"):
            r = vramfit.train(model="llama-3-8b", fsdp="full", dp=8, metric=metric)
            self.assertEqual(r["metric"], metric)
            self.assertEqual(r.peak, memory[metric])
            self.assertEqual(r["entries"], smi["entries"])
        self.assertLess(memory["allocated"], memory["reserved"])
        self.assertLess(memory["reserved"], memory["nvidia_smi"])
        with self.assertRaisesRegex(vramfit.Error, "did you mean"):
            vramfit.train(model="gpt2", metric="allocatd")

    def test_load(self):
        expected = cli_json("load", "--model", "llama-3-70b", "--weights", "nf4")
        r = vramfit.load(model="llama-3-70b", weights="nf4")
        self.assertEqual((r.peak, r.fits), (expected["total"], expected["fits"]))
        self.assertEqual(sum(r.breakdown.values()), r.peak)

    def test_plan_best_is_train_with_its_arguments(self):
        p = vramfit.plan(model="llama-3-8b", gpus=8)
        chosen = cli_json("plan", "--model", "llama-3-8b", "--gpus", "8")["chosen"]
        self.assertEqual(p.peak, chosen["required"])
        status, out, _ = run_cli([*chosen["argv"][1:], "--format", "json"])
        self.assertEqual((status, p.best.to_json()), (0, out))
        self.assertEqual(p.best.peak, p.peak)
        self.assertEqual(p.breakdown, p.best.breakdown)

    def test_plan_where_nothing_fits(self):
        p = vramfit.plan(model="llama-3-70b", gpus=1, no_offload=True)
        self.assertEqual((p.fits, p.peak, p.best, p.breakdown), (False, None, None, None))

    def test_cli_in_process_is_the_binary(self):
        for words in (["train", "-m", "llama-3-8b", "--dp", "2", "--zero", "1"],
                      ["--units", "GB", "infer", "-m", "qwen2.5-7b"], ["models"], ["--version"],
                      ["train", "--dp", "0"]):
            with self.subTest(words=words):
                self.assertEqual(tuple(vramfit.cli(*words)), run_cli(words))

    def test_names_are_the_subcommands(self):
        # the docstrings and signatures against --help: test_typed.py
        self.assertEqual(vramfit.min_gpus.__name__, "min_gpus")


class Dtypes(unittest.TestCase):
    def test_a_row_per_format_is_that_formats_estimate(self):
        r = vramfit.infer(model="llama-3-8b", batch=4, dtypes=["nf4", "bf16"])
        self.assertIs(type(r), vramfit.Result)
        self.assertEqual([row["weights_format"] for row in r.dtypes], ["nf4", "bf16"])
        for row in r.dtypes:
            one = vramfit.infer(model="llama-3-8b", batch=4, weights=row["weights_format"])
            self.assertEqual((row["total"], row["fits"], row["max_batch"]),
                             (one.peak, one.fits, one["max_batch"]))
        # NF4 with double quantization, Llama-3-8B by hand (tests/cli/dtypes_test.cpp derives it).
        self.assertEqual(r.dtypes[0]["weights"], 5_702_296_448)
        self.assertEqual(dict(vramfit.infer(model="llama-3-8b", batch=4, dtypes="nf4,bf16")),
                         dict(r))

    def test_true_is_the_default_list_and_a_bad_name_is_refused(self):
        rows = vramfit.train(model="gpt2", dtypes=True).dtypes
        self.assertEqual([row["precision"] for row in rows],
                         ["fp32", "amp-bf16", "bf16-fp32-master", "bf16"])
        self.assertNotIn("dtypes", vramfit.infer(model="gpt2", dtypes=False))
        with self.assertRaisesRegex(vramfit.Error, "unknown --dtypes weight format 'int3'"):
            vramfit.infer(dtypes=["bf16", "int3"])
        with self.assertRaisesRegex(vramfit.Error, "leave out --weights"):
            vramfit.infer(dtypes=True, weights="nf4")


class From(unittest.TestCase):
    """from_= is --from: a launcher's file, or vLLM's arguments, with the tool's answer."""

    ZERO3 = "tests/data/from/deepspeed/hf-transformers_tests-deepspeed_ds_config_zero3.json"

    def test_a_file_is_the_tools_from(self):
        expected = cli_json("train", "--dp", "2", "--from", "deepspeed", self.ZERO3)
        r = vramfit.train(dp=2, from_=("deepspeed", pathlib.Path(ROOT, self.ZERO3)))
        self.assertEqual(r.peak, expected["memory"]["total"])
        self.assertEqual(r["from"]["options"], expected["from"]["options"])

    def test_vllm_arguments_go_last(self):
        words = ["llama-3-70b", "--max-model-len", "8192", "-tp", "2"]
        status, out, errors = run_cli(["infer", "-g", "h200", "-f", "json", "--from", "vllm", "--",
                                       *words])
        self.assertEqual(status, 0, errors)
        expected = json.loads(out)
        r = vramfit.infer(gpu="h200", from_=("vllm", words))
        self.assertEqual(r["from"]["options"], expected["from"]["options"])
        self.assertEqual(r["kv_pool"], expected["kv_pool"])

    def test_from_takes_a_pair(self):
        with self.assertRaisesRegex(TypeError, r"from_= takes \(kind, file\)"):
            vramfit.train(from_="ds_config.json")
        with self.assertRaisesRegex(TypeError, "did you mean from_"):
            vramfit.train(**{"from": ("deepspeed", self.ZERO3)})
        with self.assertRaisesRegex(vramfit.Error, "^vramfit: unknown --from 'deepspeeed'"):
            vramfit.train(from_=("deepspeeed", self.ZERO3))


class Readme(unittest.TestCase):
    def test_the_readme_command_prints_the_tools_peak(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            command = re.search(r'^python3 -c "(.*)"$', f.read(), re.MULTILINE).group(1)
        done = subprocess.run([sys.executable, "-c", command], cwd=ROOT, capture_output=True,
                              text=True, check=True)
        expected = cli_json("train", "--model", "llama-3-8b", "--gpu", "h100")
        self.assertEqual(done.stdout, f"{expected['memory']['total']}\n")


class Models(unittest.TestCase):
    CONFIG = os.path.join(ROOT, "tests", "data", "hf", "qwen2.5-0.5b.json")

    def test_a_dict_is_the_file(self):
        with open(self.CONFIG, encoding="utf-8") as f:
            config = json.load(f)
        from_dict = vramfit.Model.from_hf_config(config, name="qwen2.5-0.5b")
        from_path = vramfit.Model.from_hf_config(pathlib.Path(self.CONFIG))
        self.assertEqual(from_dict.name, "qwen2.5-0.5b")
        _, expected, _ = run_cli(["train", "--model", self.CONFIG, "--lora-rank", "8",
                                  "--format", "json"])
        for model in (from_dict, from_path):
            self.assertEqual(vramfit.train(model=model, lora_rank=8).to_json(), expected)

    def test_a_dict_is_named_by_name_or_path(self):
        with open(self.CONFIG, encoding="utf-8") as f:
            config = dict(json.load(f), _name_or_path="Qwen/Qwen2.5-0.5B-Instruct")

        class PretrainedConfig:  # transformers' configs give their dict so
            def to_dict(self):
                return config

        model = vramfit.Model.from_hf_config(PretrainedConfig())
        self.assertEqual(model.name, "Qwen2.5-0.5B-Instruct")
        expected = cli_json("infer", "--model", json.dumps(config))
        self.assertEqual(vramfit.infer(model=model).to_json(),
                         json.dumps(expected, indent=2, sort_keys=True) + "\n")
        self.assertEqual(model.parameters, expected["model"]["parameters"])

    def test_presets_are_the_tools(self):
        rows = cli_json("models")
        models = vramfit.models()
        self.assertEqual([m.key for m in models], [r["key"] for r in rows])
        self.assertEqual([(m.name, m.parameters, m.active_parameters) for m in models],
                         [(r["name"], r["parameters"], r["active_parameters"]) for r in rows])
        self.assertEqual(vramfit.train(model=models[7]).to_json(),
                         vramfit.train(model=rows[7]["key"]).to_json())
        self.assertEqual(vramfit.gpus(), cli_json("gpus"))
        self.assertEqual(vramfit.frameworks(), cli_json("frameworks"))


class AssertFits(unittest.TestCase):
    def test_fit_report_fields_are_fit_hpp(self):
        with open(os.path.join(ROOT, "include", "vramfit", "fit.hpp"), encoding="utf-8") as f:
            listed = re.search(r'fit_report\{(required[^}]*)\}', f.read().replace('"\n', ""))
        names = re.sub(r'\s*"\s*', "", listed.group(1)).split(",")
        self.assertEqual(tuple(n.strip() for n in names), FIT_REPORT)

    def test_the_compile_errors_numbers(self):
        # tests/compile_fail/plan_does_not_fit.cpp: Llama-3-8B, amp<bf16>, AdamW, one H100,
        # micro-batch 1 x 4096, the library's default (fixed-share) allocator reserve. g++'s
        # error for it is in docs/troubleshooting.md (checked by docs.troubleshooting).
        with open(os.path.join(ROOT, "docs", "troubleshooting.md"), encoding="utf-8") as f:
            page = f.read()
        section = page[page.index('<a id="does-not-fit">'):]
        template = re.search(r"fit_report\{(vramfit::bytes\{\d+\}(, )?)+\}", section).group(0)
        compiled = [int(n) for n in re.findall(r"bytes\{(\d+)\}", template)]
        with self.assertRaises(vramfit.DoesNotFit) as raised:
            vramfit.assert_fits(model="llama-3-8b", precision="amp-bf16", seq_len=4096,
                                reserve="share")
        message = str(raised.exception)
        self.assertTrue(message.startswith("vramfit: the plan does not fit the GPU"))
        named = re.search(r"fit_report\{([^}]*)\}", message).group(1)
        pairs = [pair.split("=") for pair in named.split(", ")]
        self.assertEqual([name for name, _ in pairs], list(FIT_REPORT))
        self.assertEqual([int(n) for _, n in pairs], compiled)
        self.assertEqual(raised.exception.result.report(), dict(zip(FIT_REPORT, compiled)))

    def test_returns_what_fits(self):
        r = vramfit.assert_fits(model="llama-3-8b", fsdp="full", dp=8)
        self.assertTrue(r.fits)
        self.assertIs(vramfit.assert_fits(r), r)
        with self.assertRaises(vramfit.DoesNotFit):
            vramfit.assert_fits(vramfit.infer(model="llama-3-70b", gpu="rtx-4090"))
        with self.assertRaisesRegex(TypeError, "not both"):
            vramfit.assert_fits(r, dp=2)


class Threads(unittest.TestCase):
    # A size as the tool writes it: "13.04 GiB", "900 MB" (not a bandwidth, "900 GB/s").
    SIZE_UNIT = re.compile(r"[0-9] ([kKMGTP]i?B)\b(?!/)")

    def assert_units(self, out, binary):
        units = set(self.SIZE_UNIT.findall(out))
        self.assertTrue(units)
        self.assertEqual({unit.endswith("iB") for unit in units}, {binary}, units)

    def test_runs_side_by_side_keep_their_own_units(self):
        """A run releases the GIL and shares no state: estimates in GiB beside a plan in GB."""
        started, plan = threading.Event(), {}

        def long_plan():
            started.set()
            plan["run"] = vramfit.cli("plan", "--model", "llama-3-70b", "--gpus", "64",
                                      "--sharding", "any", "--all", "--units", "GB")

        thread = threading.Thread(target=long_plan)
        thread.start()
        started.wait()
        beside = []
        while thread.is_alive():
            beside.append(vramfit.cli("train", "--params", "7e9"))
        thread.join()
        # Holding the GIL, the plan would let one or two estimates run, before it and after.
        self.assertGreaterEqual(len(beside), 5, "nothing ran beside the plan: the GIL was held")
        self.assertEqual(plan["run"].status, 0, plan["run"].err)
        self.assert_units(plan["run"].out, binary=False)
        for run in beside:
            self.assertEqual(run.status, 0, run.err)
            self.assert_units(run.out, binary=True)


if __name__ == "__main__":
    unittest.main()
