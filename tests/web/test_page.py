"""The browser page (docs/web) in headless Chromium against the command-line tool's binary.

For each configuration of configurations.txt (21 training, 16 inference of which 3 are vLLM's
serving budget) the page is given the knobs in its address's hash, as a shared link would; the
figures it shows (the configuration line, the peak, the capacity, the verdict, the largest batch
and sequence or context, the bytes of each component at the peak and the bar's segments) must
equal those of `vramfit train|infer -f json` run by the binary (inference's largest batch and
context: the last line of its table, as its JSON has none; the serving budget: what it requests
of the GPU's total, its parts, and the sequences and tokens of its KV pool), and for training its
timeline plot must have the events and the peak of `vramfit train --timeline -f json`. The
form's options and choice lists must be the parser's, as `vramfit completion bash` writes them.
The page is served from the build tree's web/ folder by a local HTTP server, and opened once from
file:// too.
A screenshot of the first configuration is written to VRAMFIT_SCREENSHOT (docs/web.md says how to
update docs/images/web.png with it).

Environment: VRAMFIT_CLI (the tool's binary), VRAMFIT_WEB (the built page's folder),
VRAMFIT_SCREENSHOT (where the screenshot goes).
"""

import concurrent.futures
import functools
import http.server
import json
import os
import pathlib
import re
import subprocess
import threading
import unittest
import urllib.parse

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CLI = os.environ["VRAMFIT_CLI"]
WEB = os.environ["VRAMFIT_WEB"]
SCREENSHOT = os.environ["VRAMFIT_SCREENSHOT"]

COMPONENTS = ["weights", "gradients", "master_weights", "optimizer_states", "activations",
              "kv_cache", "buffers", "overhead"]
SERVED = ["weights", "profile_peak", "non_torch", "cuda_graphs", "kv_pool"]  # of `requested`
FLAGS = {"qlora", "sp", "expandable-segments"}  # the configurations' flags: no value


def configurations():
    """configurations.txt's knobs, as the page's hash holds them: the tool's option names, `mode`
    the subcommand (train when absent), `config` a pasted config.json, given to --model. The
    first is the screenshot's."""
    root = pathlib.Path(__file__).resolve().parents[2]
    listed = []
    for line in (pathlib.Path(__file__).parent / "configurations.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            knobs = dict(urllib.parse.parse_qsl(line))
            if knobs.get("config", "").startswith("@"):
                knobs["config"] = (root / knobs["config"][1:]).read_text()
            listed.append(knobs)
    return listed


def cli_words(knobs, format="json"):
    """The tool's words for `knobs`, written here from the option names, not by the page."""
    knobs = dict(knobs)
    words = [knobs.pop("mode", "train"), "-f", format]
    for name, value in knobs.items():
        if name == "config":
            words += ["--model", value]
        elif name in FLAGS:
            words.append("--" + name)
        else:
            words += ["--" + name, value]
    return words


def run_tool(words):
    run = subprocess.run([CLI, *words], capture_output=True, text=True)
    if run.returncode != 0:
        raise AssertionError(f"vramfit {' '.join(words[:3])}...: {run.stderr}")
    return run.stdout


# The binary's runs, started ahead (prefetch) on one worker while the browser works on the other
# core: most of the test's time is the binary's largest-micro-batch searches.
RUNS = concurrent.futures.ThreadPoolExecutor(max_workers=1)
STARTED = {}


def prefetch(words):
    if tuple(words) not in STARTED:
        STARTED[tuple(words)] = RUNS.submit(run_tool, words)


def tool(words):
    """The binary's standard output for `words`, which must succeed."""
    started = STARTED.get(tuple(words))
    return started.result() if started else run_tool(words)


def largest(knobs, expected):
    """The binary's largest batch and sequence (train) or context (infer) for `knobs`."""
    if knobs.get("mode", "train") == "train":
        return expected["max_micro_batch"], expected["max_sequence"]
    return expected["max_batch"], expected["max_context"]


def completion():
    """`vramfit completion bash` read back: {subcommand: its option names} and {option: values}."""
    script = tool(["completion", "bash"])
    options = {sub: {w[2:] for w in words.split()} - {"help", "units"}
               for sub, words in re.findall(r"^    ([\w-]+)\) words=\"(--[^\"]*)\";;$", script,
                                            re.M)}
    values = {option: words.split()
              for option, words in re.findall(r"^    --([\w-]+)(?:\|-\w)?\) words=\"([^\"]*)\";;$",
                                              script, re.M)}
    return options, values


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Page(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # In the order the tests ask for them: inference, then training.
        for knobs in sorted(configurations(), key=lambda k: "mode" not in k):
            prefetch(cli_words(knobs))
            if "mode" not in knobs:
                prefetch([*cli_words(knobs), "--timeline"])
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
        RUNS.shutdown(cancel_futures=True)

    def wait_ready(self):
        """Waits until the page shows the figures of its hash (it rewrites the hash as its form
        holds it, and then sets `shown` to it)."""
        WebDriverWait(self.driver, 60).until(lambda d: d.execute_script(
            "return document.body.dataset.status === 'ready' && "
            "document.body.dataset.shown === location.hash"))

    def show(self, knobs, valid=True):
        """Opens the page with `knobs` in its hash and waits until it shows their figures (or,
        not `valid`, the tool's message)."""
        hash = "#" + urllib.parse.urlencode(knobs)
        if self.driver.current_url.startswith(self.url):  # a new hash: no reload
            self.driver.execute_script("location.hash = arguments[0]", hash)
        else:
            self.driver.get(self.url + hash)
        self.wait_ready()
        self.assertEqual(self.driver.execute_script(
            "return document.getElementById('result').dataset.valid"), str(valid).lower(),
            self.text("#error"))

    def text(self, css):
        return self.driver.execute_script(
            "return document.querySelector(arguments[0]).textContent", css)

    def hash(self):
        return dict(urllib.parse.parse_qsl(self.driver.execute_script("return location.hash")[1:]))

    def check_figures(self, knobs, expected):
        """The page shows the binary's figures for `knobs` (`expected`: its JSON, an estimate or
        vLLM's serving budget)."""
        if "kv_pool" in expected:
            peak, capacity = expected["requested"], expected["device"]["cuda_total"]
            parts = {name: expected[name] for name in SERVED}
            most = expected["sequences"], expected["kv_tokens"]
        else:
            peak, capacity = expected["memory"]["total"], expected["device"]["capacity"]
            parts = {name: expected["at_peak"].get(name, 0) for name in COMPONENTS}
            most = largest(knobs, expected)
        self.assertEqual(self.text("#configuration"), expected["configuration"])
        self.assertEqual(int(self.text("#peak")), peak)
        self.assertEqual(int(self.text("#capacity")), capacity)
        self.assertEqual(self.driver.execute_script(
            "return document.getElementById('verdict').dataset.fits"),
            "true" if expected["fits"] else "false")
        self.assertEqual((int(self.text("#max-batch")), int(self.text("#max-length"))), most)
        shown = self.driver.execute_script(
            "return [...document.querySelectorAll('#breakdown tbody tr')]"
            ".map(r => [r.dataset.component, Number(r.cells[2].textContent)])")
        self.assertEqual(dict(shown), parts)
        # The stacked bar has a segment for each part with bytes, in order.
        segments = self.driver.execute_script(
            "return [...document.querySelectorAll('#bar .segment')].map(s => s.dataset.component)")
        self.assertEqual(segments, [name for name, size in parts.items() if size > 0])

    def check_timeline(self, knobs):
        """One plotted event per event of the binary's --timeline, the peak marker at its
        timeline_peak bytes and event."""
        timeline = json.loads(tool([*cli_words(knobs), "--timeline"]))
        plotted = self.driver.execute_script(
            "const p = document.querySelector('#timeline .peak');"
            "return {events: [...document.querySelectorAll('#timeline .event')]"
            ".map(e => Number(e.dataset.alive)), peak: p && p.dataset.bytes,"
            "index: p && p.dataset.index}")
        self.assertEqual(plotted["events"], [e["alive"] for e in timeline["timeline"]])
        self.assertEqual(int(plotted["peak"]), timeline["timeline_peak"]["alive"])
        self.assertEqual(int(plotted["index"]), timeline["timeline_peak"]["index"])

    def test_training_figures_equal_the_tool(self):
        listed = [k for k in configurations() if "mode" not in k]
        self.assertEqual(len(listed), 21)
        for i, knobs in enumerate(listed):
            with self.subTest(configuration=i, knobs={k: v[:40] for k, v in knobs.items()}):
                self.show(knobs)
                self.check_figures(knobs, json.loads(tool(cli_words(knobs))))
                self.check_timeline(knobs)
                if i == 0:
                    self.driver.save_screenshot(SCREENSHOT)

    def test_inference_figures_equal_the_tool(self):
        listed = [k for k in configurations() if k.get("mode") == "infer"]
        self.assertEqual(len(listed), 16)
        self.assertEqual(sum("utilization" in k or "framework" in k for k in listed), 3)
        for i, knobs in enumerate(listed):
            with self.subTest(configuration=i, knobs={k: v[:40] for k, v in knobs.items()}):
                self.show(knobs)
                self.check_figures(knobs, json.loads(tool(cli_words(knobs))))
                self.assertEqual(self.driver.execute_script(
                    "return document.querySelectorAll('#timeline svg').length"), 0)

    def test_the_form_is_the_parsers(self):
        """Each mode's fields are its subcommand's options but those the page leaves out, and
        each choice list is the option's values, in the parser's order; a free-form option is
        free-form on the page."""
        options, values = completion()
        for mode in ["train", "infer"]:
            with self.subTest(mode=mode):
                self.show({"mode": mode} if mode != "train" else {})
                form = self.driver.execute_script(
                    "return {omitted: modes[arguments[0]].omitted, fields: "
                    "[...document.querySelectorAll('#fields [data-option]')].map(f => ({name: f.id,"
                    " choices: f.tagName === 'SELECT' ? [...f.options].map(o => o.value)"
                    ".filter(v => v !== '') : null}))}", mode)
                names = [f["name"] for f in form["fields"]]
                self.assertEqual(len(names), len(set(names)))
                self.assertFalse(set(names) & set(form["omitted"]))
                self.assertEqual(set(names) | set(form["omitted"]), options[mode])
                for f in form["fields"]:
                    self.assertEqual(f["choices"], values.get(f["name"]), f["name"])

    def test_lora_targets_show_with_lora(self):
        hidden = "return document.getElementById('lora-targets').parentElement.hidden"
        self.show({"model": "mistral-7b", "gpu": "l40s"})
        self.assertTrue(self.driver.execute_script(hidden))
        for lora in [{"lora-rank": "16"}, {"qlora": "1"}]:
            self.show({"model": "mistral-7b", "gpu": "l40s", **lora, "lora-targets": "all-linear"})
            self.assertFalse(self.driver.execute_script(hidden))
            self.assertEqual(self.hash().get("lora-targets"), "all-linear")

    def test_form_writes_the_hash(self):
        """A knob changed in the form goes to the address, and the figures follow it."""
        self.show({"model": "gpt2", "gpu": "l4"})
        self.driver.execute_script(
            "const f = document.getElementById('micro-batch'); f.value = '4';"
            "f.dispatchEvent(new Event('change', {bubbles: true}));")
        self.assertEqual(self.hash(), {"model": "gpt2", "micro-batch": "4", "gpu": "l4"})
        expected = json.loads(tool(cli_words(self.hash())))
        self.assertEqual(int(self.text("#peak")), expected["memory"]["total"])

    def test_switch_to_inference_keeps_shared_knobs(self):
        """The train | infer switch: the knobs both subcommands have stay, the others go."""
        self.show({"model": "gpt2", "gpu": "l4", "micro-batch": "4", "tp": "2"})
        self.driver.execute_script(
            "const r = document.querySelector('input[name=mode][value=infer]'); r.checked = true;"
            "r.dispatchEvent(new Event('change', {bubbles: true}));")
        self.assertEqual(self.hash(), {"mode": "infer", "model": "gpt2", "tp": "2", "gpu": "l4"})
        self.check_figures(self.hash(), json.loads(tool(cli_words(self.hash()))))

    def test_bad_input_shows_the_tools_message(self):
        for knobs in [{"model": "llama-3-8b", "gpu": "h100", "tp": "3"},
                      {"mode": "infer", "model": "llama-3-8b", "gpu": "h100", "tp": "3"}]:
            self.show(knobs, valid=False)
            run = subprocess.run([CLI, *cli_words(knobs)], capture_output=True, text=True)
            self.assertNotEqual(run.returncode, 0)
            self.assertEqual(self.text("#error"), run.stderr)
            # The message replaces the figures in place: no verdict of the last valid values.
            self.assertFalse(self.driver.find_element(By.ID, "verdict").is_displayed())
            self.assertTrue(self.driver.find_element(By.ID, "error").is_displayed())
            self.assertLess(self.driver.execute_script(
                "return document.getElementById('error').getBoundingClientRect().top"),
                self.driver.execute_script("return window.innerHeight"))
        # A GPU the list lacks goes to the tool, which names what it knows.
        self.show({"model": "gpt2", "gpu": "h1000"}, valid=False)
        self.assertIn("unknown --gpu 'h1000'", self.text("#error"))
        self.show({"mode": "plan"}, valid=False)
        self.assertEqual(self.text("#error"), "vramfit page: the page has no mode 'plan'")

    def test_a_phone_width(self):
        """At 360 px the page scrolls only down: nothing is wider than the window."""
        self.driver.set_window_size(360, 800)
        try:
            for knobs in [{"model": "llama-3-8b", "gpu": "h100"},
                          {"mode": "infer", "model": "gpt2", "gpu": "l4", "utilization": "90"}]:
                self.show(knobs)
                self.assertTrue(self.driver.find_element(By.ID, "verdict").is_displayed())
                widths = self.driver.execute_script(
                    "return [document.documentElement.scrollWidth, "
                    "document.documentElement.clientWidth]")
                self.assertLessEqual(widths[0], widths[1], knobs)
        finally:
            self.driver.set_window_size(1200, 1000)

    def test_works_offline_from_a_file(self):
        """Opened from the folder (file://), without a server, the page shows the same. (Named to
        run last, so that the others' page stays loaded from the server.)"""
        knobs = {"mode": "infer", "model": "gpt2", "gpu": "l4", "batch": "8"}
        self.driver.get(pathlib.Path(WEB, "index.html").resolve().as_uri() + "#" +
                        urllib.parse.urlencode(knobs))
        self.wait_ready()
        self.check_figures(knobs, json.loads(tool(cli_words(knobs))))


if __name__ == "__main__":
    unittest.main()
