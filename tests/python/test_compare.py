"""vramfit.compare: a snapshot's pickle (what torch.cuda.memory._dump_snapshot writes: pickle.dump
of plain dicts) read without torch, its dict, or its JSON file, against the tool on the JSON."""

import collections
import json
import os
import pickle
import tempfile
import unittest

import vramfit
from support import ROOT, run_cli

SNAPSHOT = os.path.join(ROOT, "tests", "data", "compare", "llama3-8b-2l_snapshot.json")
RUN = {"model": os.path.join(ROOT, "tests", "validation", "gpu", "configs", "llama-3-8b-2l.json"),
       "precision": "bf16", "optimizer": "adamw", "micro_batch": 1, "seq_len": 1024, "gpu": "h100"}
ARGS = ["--model", RUN["model"], "--precision", "bf16", "--optimizer", "adamw", "--micro-batch",
        "1", "--seq-len", "1024", "--gpu", "h100"]


def without_file(answer):
    answer = dict(answer)
    answer["measured"] = {k: v for k, v in answer["measured"].items() if k != "file"}
    return answer


class Compare(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        status, out, errors = run_cli(["compare", "--snapshot", SNAPSHOT, *ARGS, "--format", "json"])
        assert status == 0, errors
        cls.expected = json.loads(out)
        with open(SNAPSHOT) as f:
            cls.snapshot = json.load(f)

    def test_the_pickle_reads_as_its_json(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "snapshot.pickle")
            with open(path, "wb") as f:
                pickle.dump(self.snapshot, f)
            r = vramfit.compare(snapshot=path, **RUN)
        # make_snapshot.py's replay: the live blocks' peak, 14,937,180,160 B.
        self.assertEqual(r["measured"]["allocated"], 14_937_180_160)
        self.assertEqual(without_file(r), without_file(self.expected))

    def test_a_dict_and_a_json_file(self):
        self.assertEqual(without_file(vramfit.compare(snapshot=self.snapshot, **RUN)),
                         without_file(self.expected))
        self.assertEqual(dict(vramfit.compare(snapshot=SNAPSHOT, **RUN)), self.expected)

    def test_a_pickle_that_names_a_class_is_refused_unloaded(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "hostile.pickle")
            with open(path, "wb") as f:
                pickle.dump(collections.OrderedDict(self.snapshot), f)
            with self.assertRaisesRegex(vramfit.Error, "names collections.OrderedDict"):
                vramfit.compare(snapshot=path, **RUN)
            with open(path, "wb") as f:
                f.write(pickle.dumps(self.snapshot)[:100])  # cut short
            with self.assertRaisesRegex(vramfit.Error, "not a readable pickle"):
                vramfit.compare(snapshot=path, **RUN)

    def test_refusals_and_a_log(self):
        with self.assertRaisesRegex(TypeError, "snapshot= takes a path"):
            vramfit.compare(snapshot=3, **RUN)
        with self.assertRaisesRegex(vramfit.Error, "device_traces are empty"):
            vramfit.compare(snapshot={"segments": [], "device_traces": [[]]}, **RUN)
        with self.assertRaisesRegex(vramfit.Error, "give --snapshot FILE or --log FILE"):
            vramfit.compare(**RUN)
        with tempfile.TemporaryDirectory() as folder:
            log = os.path.join(folder, "titan.log")
            with open(log, "w") as f:
                f.write("step: 10  loss:  8.1000  memory: 38.01GiB(40.00%)  tps: 2\n")
            r = vramfit.compare(log=log, **RUN)
        self.assertEqual(r["measured"]["reserved"], 40_812_926_730)  # 38.01 x 2^30, rounded


if __name__ == "__main__":
    unittest.main()
