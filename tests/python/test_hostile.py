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
