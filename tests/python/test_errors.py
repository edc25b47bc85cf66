"""Errors: keywords the tool does not have are TypeErrors naming them; values it refuses are
vramfit.Error (a ValueError) with the tool's own one-line message; --check's exit status 1 is
DoesNotFit."""

import json
import unittest

import vramfit
from support import as_keywords, run_cli

HELP_HINT = " (see vramfit --help)"

# Commands the tool refuses (exit 2), with the keywords the test derives from them.
REFUSED = [
    "train --precision bf17",
    "train --optimizer adamw9",
    "train --gpu h1000",
    "train --model llama-9",
    "infer --weights int3",
    "train --micro-batch 0",
    "train --micro-batch 2.5",
    "train --micro-batch 4611686018427387904",  # 2**62: the activations overflow int64
    "train --seq-len 4611686018427387904",
    "infer --batch 4611686018427387904",
    "train --dp 1180591620717411303424",  # 2**70: not an int64
    "train --optimizer sgd --momentum nan",
    "train --dropout nan",
    "train --dropout 1.5",
    "plan --gpus 8 --compute-efficiency nan",
    "plan --gpus 0",
    "train --fsdp-version 3",
    "train --zero 4",
    "train --tp 3",
    "train --pp 64",
    "train --pp 4 --pp-stages 10,10",
    "train --lora-rank -1",
    "train --gpu 1e400GiB",
    "train --reshard-after-forward maybe --fsdp full --fsdp-version 2 --dp 2",
    "train --model tests/data/hf/does-not-exist.json",
    "train --model meta-llama/Llama-3-8B",
]


class Refusals(unittest.TestCase):
    def test_the_tools_message(self):
        for command in REFUSED:
            with self.subTest(command=command):
                status, _, errors = run_cli([*command.split(), "--format", "json"])
                self.assertEqual(status, 2)
                line = errors.rstrip("\n")
                expected = line[: -len(HELP_HINT)] if line.endswith(HELP_HINT) else line
                subcommand, keywords = as_keywords(command)
                with self.assertRaises(vramfit.Error) as raised:
                    getattr(vramfit, subcommand)(**keywords)
                self.assertIsInstance(raised.exception, ValueError)
                self.assertEqual(str(raised.exception), expected)

    def test_python_values_as_the_tool_reads_them(self):
        cases = {  # keywords -> the same refusal as the command
            "train --micro-batch 4611686018427387904": {"micro_batch": 2**62},
            "train --dp 1180591620717411303424": {"dp": 2**70},
            "train --optimizer sgd --momentum nan": {"optimizer": "sgd",
                                                     "momentum": float("nan")},
            "train --dropout inf": {"dropout": float("inf")},
        }
        for command, keywords in cases.items():
            with self.subTest(command=command):
                status, _, errors = run_cli(command.split())
                self.assertEqual(status, 2)
                with self.assertRaises(vramfit.Error) as raised:
                    vramfit.train(**keywords)
                self.assertIn(str(raised.exception), errors)

    def test_a_bad_config_dict(self):
        config = {"model_type": "not-a-model", "hidden_size": 64}
        status, _, errors = run_cli(["infer", "--model", json.dumps(config)])
        self.assertEqual(status, 2)
        with self.assertRaises(vramfit.Error) as raised:
            vramfit.Model.from_hf_config(config)
        self.assertEqual(str(raised.exception), errors.rstrip("\n"))


class Keywords(unittest.TestCase):
    def test_unknown_keyword_names_it(self):
        with self.assertRaisesRegex(TypeError, r"train\(\) got an unexpected keyword argument "
                                    r"'micro_bach'; did you mean micro_batch\?"):
            vramfit.train(micro_bach=2)
        with self.assertRaisesRegex(TypeError, "'gpus'"):
            vramfit.train(gpus=8)  # plan's option, not train's
        with self.assertRaisesRegex(TypeError, "'units'"):
            vramfit.infer(units="GB")

    def test_format_is_the_packages(self):
        with self.assertRaisesRegex(TypeError, r"train\(\) does not take format="):
            vramfit.train(format="table")

    def test_flags_take_booleans(self):
        with self.assertRaisesRegex(TypeError, r"qlora= is a flag \(--qlora\)"):
            vramfit.train(qlora=1)
        self.assertEqual(vramfit.train(qlora=False).to_json(),
                         vramfit.train().to_json())

    def test_one_value_or_a_list(self):
        with self.assertRaisesRegex(TypeError, r"dp= \(--dp\) takes one value"):
            vramfit.train(dp=[2, 4])
        with self.assertRaisesRegex(TypeError, "dp= takes a number or a string, not dict"):
            vramfit.train(dp={})

    def test_none_leaves_an_option_out(self):
        self.assertEqual(vramfit.train(zero=None, dp=2).to_json(),
                         vramfit.train(dp=2).to_json())


class Check(unittest.TestCase):
    def test_check_raises_where_the_tool_exits_1(self):
        for command in ["train --model llama-3-8b --check",
                        "infer --model llama-3-70b --check",
                        "load --model llama-3.1-405b --check",
                        "plan --model llama-3-70b --gpus 1 --no-offload --check"]:
            with self.subTest(command=command):
                status, expected, _ = run_cli([*command.split(), "--format", "json"])
                self.assertEqual(status, 1)
                subcommand, keywords = as_keywords(command)
                with self.assertRaises(vramfit.DoesNotFit) as raised:
                    getattr(vramfit, subcommand)(**keywords)
                self.assertIsInstance(raised.exception, AssertionError)
                self.assertEqual(raised.exception.result.to_json(), expected)

    def test_check_passes_where_the_tool_exits_0(self):
        status, expected, _ = run_cli(["infer", "--check", "--format", "json"])
        self.assertEqual(status, 0)
        self.assertEqual(vramfit.infer(check=True).to_json(), expected)


if __name__ == "__main__":
    unittest.main()
