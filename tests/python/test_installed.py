"""`cmake --install --prefix P` (the package.install test's prefix): the module imports from
P/VRAMFIT_PYTHON_INSTALL_DIR alone, not from the build tree, and agrees with the tool; that
directory is the interpreter's platlib under the configured prefix when it lies there."""

import os
import sysconfig
import unittest

import vramfit
from support import run_cli

PREFIX = os.environ["VRAMFIT_PREFIX"]
INSTALL_DIR = os.environ["VRAMFIT_PYTHON_INSTALL_DIR"]


class Installed(unittest.TestCase):
    def test_imported_from_the_prefix(self):
        package = os.path.join(PREFIX, INSTALL_DIR, "vramfit")
        self.assertEqual(os.path.dirname(vramfit.__file__), package)
        self.assertEqual(os.path.dirname(vramfit._vramfit.__file__), package)

    def test_agrees_with_the_tool(self):
        _, expected, _ = run_cli(["train", "--model", "llama-3-8b", "--gpu", "h100", "-f", "json"])
        self.assertEqual(vramfit.train(model="llama-3-8b", gpu="h100").to_json(), expected)

    def test_the_install_dir(self):
        configured = os.environ["VRAMFIT_INSTALL_PREFIX"]
        platlib = sysconfig.get_path("platlib")
        if os.path.commonpath([configured, platlib]) == configured:
            expected = os.path.relpath(platlib, configured)  # the default install is importable
        else:
            expected = sysconfig.get_path("platlib", "posix_prefix",
                                          vars={"base": "", "platbase": ""}).lstrip("/")
        self.assertEqual(INSTALL_DIR, expected)


if __name__ == "__main__":
    unittest.main()
