"""Issue 38 through the module: hostile values of every keyword of every subcommand (from the
tool's own option table) give the CLI's answer or its one-line refusal; errors are vramfit.Error,
ValueError or TypeError in one line; config files in UTF-16 and paths that are not UTF-8 too."""

import os
import tempfile
import unittest

import vramfit
from vramfit import _options
from support import run_cli

HELP_HINT = " (see vramfit --help)"
VALUES = ["", "abc", "9223372036854775807", "1e308", "nan", "-1", "a\x01b\nc", "\udcff\udcfeq",
          ",".join(["q_proj"] * 400), 2**70, float("nan"), float("inf"), -(2**63)]
COMMANDS = {"train": vramfit.train, "min-gpus": vramfit.min_gpus, "plan": vramfit.plan,
            "load": vramfit.load, "infer": vramfit.infer}


def cli_word(value):
    return repr(value) if isinstance(value, float) else str(value)


class HostileKeywords(unittest.TestCase):
    def test_every_keyword_answers_as_the_cli_or_refuses_in_one_line(self):
        checked = 0
        for subcommand, function in COMMANDS.items():
            for keyword, (option, kind, _) in _options.known_options(subcommand).items():
                if kind == "flag":
                    continue
                for value in VALUES:
                    with self.subTest(subcommand=subcommand, keyword=keyword, value=value):
                        words = [f"--{option}", cli_word(value), "--format", "json"]
                        status, _, err = run_cli([subcommand, *[os.fsencode(w) for w in words]])
                        try:
                            function(**{keyword: value})
                            self.assertNotEqual(status, 2, err)
                        except vramfit.Error as e:
                            self.assertEqual(status, 2)
                            self.assertEqual(str(e), err.rstrip("\n").removesuffix(HELP_HINT))
                        except (ValueError, TypeError) as e:
                            self.assertNotIn("\n", str(e))
                        checked += 1
        self.assertGreater(checked, 1000)

    def test_empty_value_is_refused_by_name_not_taken_from_the_next_keyword(self):
        with self.assertRaises(vramfit.Error) as caught:
            vramfit.train(lora_targets="", qlora=True)
        self.assertIn("--lora-targets was given an empty value", str(caught.exception))


class HostileCalls(unittest.TestCase):
    """What tests/fuzz/fuzz_python.py found: each a one-line ValueError or TypeError that names
    the input, where it was another exception, a wrong word or a whole value echoed back."""

    def assert_one_line(self, kind, call, *expected):
        with self.assertRaises(kind) as caught:
            call()
        message = str(caught.exception)
        self.assertNotIn("\n", message)
        self.assertLess(len(message), 300)
        for text in expected:
            self.assertIn(text, message)

    def test_repr_of_a_model_the_tool_refuses_does_not_raise(self):
        self.assertEqual(repr(vramfit.Model("no/such/config.json")),
                         "vramfit.Model('no/such/config.json')")

    def test_assert_fits_without_a_verdict_is_a_type_error(self):
        self.assert_one_line(TypeError, lambda: vramfit.assert_fits(model="gpt2", explain=True),
                             "assert_fits() takes an answer that fits or not")
        self.assert_one_line(TypeError, lambda: vramfit.assert_fits(5), "got int")

    def test_model_of_bytes_is_the_same_model_and_other_types_are_refused(self):
        self.assertEqual(vramfit.Model(b"gpt2").name, vramfit.Model("gpt2").name)
        self.assert_one_line(TypeError, lambda: vramfit.Model(5), "Model() takes", "not int")

    def test_config_that_is_not_json_is_one_line(self):
        cycle = {"model_type": "llama"}
        cycle["self"] = cycle
        deep = 1
        for _ in range(100_000):
            deep = [deep]
        for config, expected in [(cycle, "Circular reference"), ({"a": deep}, "nests too deep"),
                                 ({"a": float("nan")}, "not JSON")]:
            self.assert_one_line(ValueError, lambda c=config: vramfit.Model.from_hf_config(c),
                                 "from_hf_config(): the config is not JSON", expected)
        self.assert_one_line(TypeError, lambda: vramfit.Model.from_hf_config({"a": {1, 2}}),
                             "not JSON")

    def test_values_no_bytes_hold_and_long_values_name_the_keyword_briefly(self):
        self.assert_one_line(ValueError, lambda: vramfit.train(model="\ud800"),
                             "model= (--model) '\\ud800'")
        self.assert_one_line(TypeError, lambda: vramfit.train(check="x" * 100_000),
                             "check= is a flag")
        self.assert_one_line(TypeError, lambda: vramfit.cli("train", None), "not NoneType")
        self.assert_one_line(ValueError, lambda: vramfit.cli("train", "\ud800"), "argument")


class HostileFiles(unittest.TestCase):
    def test_utf16_config_is_one_line_error(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "config.json")
            with open(path, "w", encoding="utf-16") as out:
                out.write('{"model_type": "llama"}')
            with self.assertRaises(vramfit.Error) as caught:
                vramfit.Model.from_hf_config(path)
            self.assertIn("is not UTF-8", str(caught.exception))
            self.assertNotIn("\n", str(caught.exception))

    def test_path_that_is_not_utf8_is_one_line_error(self):
        name = os.fsdecode(b"/no/such/\xff\xfe.json")
        with self.assertRaises(vramfit.Error) as caught:
            vramfit.train(model=name)
        self.assertIn("does not exist", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
