"""The browser page (docs/web) in headless Chromium against the command-line tool's binary.

For each of 20 configurations the page is given the knobs in its address's hash, as a shared link
would; the figures it shows (the peak, the capacity, the verdict, the largest micro-batch and
sequence, and the bytes of each component at the peak) must equal those of `vramfit train -f json`
run by the binary, and its timeline plot must have the events and the peak of
`vramfit train --timeline -f json`. The page is served from the build tree's web/ folder by a
local HTTP server.
A screenshot of the first configuration is written to VRAMFIT_SCREENSHOT (docs/web.md says how to
update docs/images/web.png with it).

Environment: VRAMFIT_CLI (the tool's binary), VRAMFIT_WEB (the built page's folder),
VRAMFIT_SCREENSHOT (where the screenshot goes). The configurations: configurations.txt.
"""

import functools
import http.server
import json
import os
import pathlib
import subprocess
import threading
import unittest
import urllib.parse

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

CLI = os.environ["VRAMFIT_CLI"]
WEB = os.environ["VRAMFIT_WEB"]
SCREENSHOT = os.environ["VRAMFIT_SCREENSHOT"]

COMPONENTS = ["weights", "gradients", "master_weights", "optimizer_states", "activations",
              "kv_cache", "buffers", "overhead"]


def configurations():
    """configurations.txt's knobs, as the page's hash holds them: the tool's option names
    ("config" is a pasted config.json, given to --model). The first is the screenshot's."""
    root = pathlib.Path(__file__).resolve().parents[2]
    listed = []
    for line in (pathlib.Path(__file__).parent / "configurations.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            knobs = dict(urllib.parse.parse_qsl(line))
            if knobs.get("config", "").startswith("@"):
                knobs["config"] = (root / knobs["config"][1:]).read_text()
            listed.append(knobs)
    return listed


def cli_words(knobs):
    """The tool's words for `knobs`, written here from the option names, not by the page."""
    words = ["train", "-f", "json"]
    for name, value in knobs.items():
        if name == "config":
            words += ["--model", value]
        elif name == "qlora":
            words.append("--qlora")
        else:
            words += ["--" + name, value]
    return words


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Page(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        handler = functools.partial(Quiet, directory=WEB)
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # a free port
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1200,1000"]:
            options.add_argument(flag)
        cls.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        cls.url = f"http://127.0.0.1:{cls.server.server_address[1]}/index.html"

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.server.shutdown()
        cls.server.server_close()

    def show(self, knobs):
        """Opens the page with `knobs` in its hash and waits until it shows their figures."""
        hash = "#" + urllib.parse.urlencode(knobs)
        if self.driver.current_url.startswith(self.url):  # a new hash: no reload
            self.driver.execute_script("location.hash = arguments[0]", hash)
        else:
            self.driver.get(self.url + hash)
        WebDriverWait(self.driver, 60).until(lambda d: d.execute_script(
            "return document.body.dataset.status === 'ready' && "
            "document.body.dataset.shown === location.hash"))

    def text(self, css):
        return self.driver.execute_script(
            "return document.querySelector(arguments[0]).textContent", css)

    def test_figures_equal_the_tool(self):
        listed = configurations()
        self.assertEqual(len(listed), 20)
        for i, knobs in enumerate(listed):
            with self.subTest(configuration=i, knobs={k: v[:40] for k, v in knobs.items()}):
                tool = subprocess.run([CLI, *cli_words(knobs)], capture_output=True, text=True)
                self.assertEqual(tool.returncode, 0, tool.stderr)
                expected = json.loads(tool.stdout)
                self.show(knobs)
                self.assertEqual(self.driver.execute_script(
                    "return document.getElementById('result').dataset.valid"), "true",
                    self.text("#error"))
                self.assertEqual(self.text("#configuration"), expected["configuration"])
                self.assertEqual(int(self.text("#peak")), expected["memory"]["total"])
                self.assertEqual(int(self.text("#capacity")), expected["device"]["capacity"])
                self.assertEqual(self.driver.execute_script(
                    "return document.getElementById('verdict').dataset.fits"),
                    "true" if expected["fits"] else "false")
                self.assertEqual(int(self.text("#max-micro-batch")), expected["max_micro_batch"])
                self.assertEqual(int(self.text("#max-sequence")), expected["max_sequence"])
                for component in COMPONENTS:
                    shown = self.text(f"#breakdown tr[data-component='{component}'] td:last-child")
                    self.assertEqual(int(shown), expected["at_peak"].get(component, 0), component)
                # The stacked bar has a segment for each component with bytes at the peak.
                segments = self.driver.execute_script(
                    "return [...document.querySelectorAll('#bar .segment')]"
                    ".map(s => s.dataset.component)")
                self.assertEqual(segments,
                                 [c for c in COMPONENTS if expected["at_peak"].get(c, 0) > 0])
                # The timeline: one plotted event per event of the binary's --timeline, the peak
                # marker at its timeline_peak bytes and event, the highest point of the plot.
                tool = subprocess.run([CLI, *cli_words(knobs), "--timeline"], capture_output=True,
                                      text=True)
                self.assertEqual(tool.returncode, 0, tool.stderr)
                timeline = json.loads(tool.stdout)
                plotted = self.driver.execute_script(
                    "const p = document.querySelector('#timeline .peak');"
                    "return {events: [...document.querySelectorAll('#timeline .event')]"
                    ".map(e => Number(e.dataset.alive)), peak: p && p.dataset.bytes,"
                    "index: p && p.dataset.index}")
                self.assertEqual(plotted["events"], [e["alive"] for e in timeline["timeline"]])
                self.assertEqual(int(plotted["peak"]), timeline["timeline_peak"]["alive"])
                self.assertEqual(int(plotted["index"]), timeline["timeline_peak"]["index"])
                if i == 0:
                    self.driver.save_screenshot(SCREENSHOT)

    def test_form_writes_the_hash(self):
        """A knob changed in the form goes to the address, and the figures follow it."""
        self.show({"model": "gpt2", "gpu": "l4"})
        self.driver.execute_script(
            "const f = document.getElementById('micro-batch'); f.value = '4';"
            "f.dispatchEvent(new Event('change', {bubbles: true}));")
        hash = self.driver.execute_script("return location.hash")
        self.assertEqual(urllib.parse.parse_qs(hash[1:]),
                         {"model": ["gpt2"], "micro-batch": ["4"], "gpu": ["l4"]})
        tool = subprocess.run([CLI, *cli_words({"model": "gpt2", "micro-batch": "4", "gpu": "l4"})],
                              capture_output=True, text=True, check=True)
        self.assertEqual(int(self.text("#peak")), json.loads(tool.stdout)["memory"]["total"])

    def test_bad_input_shows_the_tools_message(self):
        self.show({"model": "llama-3-8b", "gpu": "h100", "tp": "3"})
        tool = subprocess.run([CLI, *cli_words({"model": "llama-3-8b", "gpu": "h100", "tp": "3"})],
                              capture_output=True, text=True)
        self.assertNotEqual(tool.returncode, 0)
        self.assertEqual(self.text("#error"), tool.stderr)


if __name__ == "__main__":
    unittest.main()
