#!/usr/bin/env python3
"""Fuzz driver for the Python module (issue 38): hostile values of every kind (empty, wrong type,
huge, NaN and infinities, control characters, invalid UTF-8, long lists, deep nesting) for every
keyword of every function of `vramfit`, seeded and bounded by a count and a time.

Each call must answer, or raise vramfit.Error, ValueError or TypeError (DoesNotFit, an
AssertionError, where a check fails) with a one-line message: another exception, a message of
several lines, a call over --timeout seconds or a crash is a failure. Standard library only.

  PYTHONPATH=build/python python3 tests/fuzz/fuzz_python.py --seed 1 --runs 100000 --seconds 60

Prints "Done N runs in S s" as libFuzzer does; exits 1 at the first failure, with the call that
failed. A crash (the process dies) is reproduced by the same seed with --verbose, which prints
each call before making it."""

import argparse
import math
import os
import random
import sys
import time
import traceback

import vramfit
from vramfit import _options

SUBCOMMANDS = {"train": vramfit.train, "infer": vramfit.infer, "min-gpus": vramfit.min_gpus,
               "load": vramfit.load, "plan": vramfit.plan}
MODELS = ["llama-3-8b", "gpt2", "mixtral-8x7b", "deepseek-v3", "bert-base-uncased", "vit-l-16",
          "qwen3-30b-a3b", "tests/data/hf/gpt-oss-20b.json", "tests/data/hf"]
ANSWERED = (vramfit.Error, ValueError, TypeError, vramfit.DoesNotFit)


def hostile_text(rng):
    """A string of one hostile kind."""
    kind = rng.randrange(12)
    if kind == 0:
        return ""
    if kind == 1:
        return "".join(chr(rng.randrange(0, 32)) for _ in range(rng.randrange(1, 8)))
    if kind == 2:
        return os.fsdecode(bytes(rng.randrange(128, 256) for _ in range(rng.randrange(1, 6))))
    if kind == 3:
        return "\ud800" + "x"  # a lone surrogate: no encoding holds it
    if kind == 4:
        return "x" * rng.choice([41, 120, 4096, 100_000])
    if kind == 5:
        return rng.choice(["nan", "inf", "-inf", "1e999", "-0", "0x10", "1_000", " 8", "8 ",
                           "١٢", "2^63", "9223372036854775808", "-9223372036854775809",
                           "80.000000000000000000GiB", "9300PB", "1e-320"])
    if kind == 6:
        return ",".join(rng.choice(["q_proj", "", "x", "8", "-1"])
                        for _ in range(rng.randrange(2, 600)))
    if kind == 7:
        return "a\nb" if rng.random() < 0.5 else "a\x00b"
    if kind == 8:
        return rng.choice(["--model", "-m", "--help", "-h", "--", "-", "--format=svg", "@file"])
    if kind == 9:
        return "\u202e\ufeff\u00a0" + rng.choice(MODELS)  # bidi, BOM, no-break space
    if kind == 10:
        return rng.choice(MODELS) + rng.choice(["", "x", "/", "/config.json", "\x7f"])
    return "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(1, 30)))


def nested(depth):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


def hostile_value(rng, choices=()):
    """A value of one hostile kind, or one of the option's own choices, sometimes bent."""
    if rng.random() < 0.4:  # a plausible value, so that calls reach the tool's later checks
        return rng.choice(list(choices) or [1, 2, 8, 64, "8", "2", "1.5", "h100", "bf16", "4096"])
    kind = rng.randrange(16)
    if kind == 0 and choices:
        return rng.choice(choices)
    if kind == 1 and choices:
        return rng.choice(choices).upper() + rng.choice(["", " ", "x", "\x00"])
    if kind == 2:
        return rng.choice([0, 1, -1, 2, 7, 2**30, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -2**63,
                           2**64, 10**100, -10**100])
    if kind == 3:
        return rng.choice([math.nan, math.inf, -math.inf, -0.0, 5e-324, 1e308, 0.5, 1.0, 2.5,
                           -1e-9, 1e-300])
    if kind == 4:
        return rng.choice([True, False])
    if kind == 5:
        return rng.choice([None, b"", b"\xff\xfe", bytearray(b"8"), 1 + 2j, object(), {},
                           {"a": 1}, set(), frozenset([1]), range(3), Ellipsis, type])
    if kind == 6:
        return [hostile_value(rng, choices) for _ in range(rng.randrange(0, 5))]
    if kind == 7:
        return [rng.choice(choices) if choices else "8"] * rng.choice([64, 65, 400, 5000])
    if kind == 8:
        return tuple(rng.randrange(-2, 100) for _ in range(rng.randrange(0, 80)))
    if kind == 9:
        return nested(rng.choice([3, 64, 65, 1000, 5000]))
    if kind == 10:
        return vramfit.Model(rng.choice(MODELS))
    if kind == 11:
        return hostile_text(rng).encode("utf-8", "surrogatepass")  # bytes, not all UTF-8
    return hostile_text(rng)


def hostile_config(rng):
    """A config.json as a dict (or not a dict) for Model.from_hf_config."""
    config = {"model_type": rng.choice(["llama", "gpt2", "bert", "vit", "deepseek_v3", "llava",
                                        "x", ""]),
              "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "intermediate_size": 14336, "vocab_size": 128256}
    for _ in range(rng.randrange(0, 4)):
        key = rng.choice(list(config) + ["hidden_act", "activation_function", "torch_dtype",
                                         "quantization_config", "text_config", "id2label",
                                         "rope_scaling", "num_key_value_heads", "dropout"])
        config[key] = hostile_value(rng)
    shape = rng.randrange(8)
    if shape == 0:
        return hostile_value(rng)
    if shape == 1:
        config["quantization_config"] = {"quant_method": hostile_value(rng, ("gptq", "awq",
                                         "bitsandbytes", "fp8", "mxfp4")),
                                         rng.choice(["bits", "group_size", "load_in_4bit",
                                                     "bnb_4bit_quant_type"]): hostile_value(rng)}
    if shape == 2:
        config[rng.choice([1, (1, 2), None, 2.5])] = 1  # keys json.dumps refuses or rewrites
    if shape == 3:
        config["self"] = config  # a cycle
    return config


def exercise(result):
    """Reads every figure an answer offers, as a launcher would."""
    for name in ("peak", "capacity", "breakdown", "report", "best"):
        method = getattr(type(result), name, None)
        if callable(method):
            try:
                method(result)
            except (KeyError, AttributeError):  # a figure this kind of answer does not hold
                pass
    for name in ("fits", "command"):
        try:
            getattr(result, name)
        except AttributeError:
            pass
    result.to_json()
    repr(result)
    len(result)


def one_call(rng):
    """(description, thunk) of one random call of the module."""
    target = rng.randrange(20)
    if target < 13:
        subcommand = rng.choice(list(SUBCOMMANDS))
        function = SUBCOMMANDS[subcommand]
        known = _options.known_options(subcommand)
        keywords = {}
        if rng.random() < 0.6:
            keywords["model"] = rng.choice(MODELS)
        for _ in range(rng.randrange(1, 5)):
            if rng.random() < 0.05:
                keyword = rng.choice(["format", "modle", "", "Model", "micro-batch", "x" * 300])
                keywords[keyword] = hostile_value(rng)
                continue
            keyword = rng.choice(sorted(known))
            _, kind, values = known[keyword]
            keywords[keyword] = hostile_value(rng, values)
        if subcommand == "train" and rng.random() < 0.1:
            return f"assert_fits(**{keywords!r})", lambda: vramfit.assert_fits(**keywords)
        return f"{function.__name__}(**{keywords!r})", lambda: function(**keywords)
    if target < 16:
        config = hostile_config(rng)
        name = hostile_value(rng) if rng.random() < 0.3 else None
        return (f"Model.from_hf_config({config!r:.300}, name={name!r:.100})",
                lambda: vramfit.Model.from_hf_config(config, name))
    if target < 18:
        words = [hostile_value(rng) for _ in range(rng.randrange(0, 6))]
        if rng.random() < 0.7:
            words.insert(0, rng.choice(list(SUBCOMMANDS) + ["models", "gpus", "frameworks",
                                                            "params", "completion", "x"]))
        return f"cli(*{words!r:.300})", lambda: vramfit.cli(*words)
    if target < 19:
        argument = hostile_value(rng)
        return f"Model({argument!r:.300}).described", lambda: vramfit.Model(argument).described
    if rng.random() < 0.5:  # a positional argument where none, or a result, is taken
        argument = hostile_value(rng)
        function = rng.choice([vramfit.models, vramfit.gpus, vramfit.frameworks,
                               vramfit.assert_fits])
        return f"{function.__name__}({argument!r:.300})", lambda: function(argument)
    listing = rng.choice([vramfit.models, vramfit.gpus, vramfit.frameworks])
    return f"{listing.__name__}()", listing


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1_000_000, help="at most this many calls")
    parser.add_argument("--seconds", type=float, default=30, help="stop after this long")
    parser.add_argument("--timeout", type=float, default=10, help="the longest a call may take")
    parser.add_argument("--verbose", action="store_true", help="print each call first")
    options = parser.parse_args()
    sys.setrecursionlimit(10_000)  # 5,000-deep lists: json.dumps recurses on them
    rng = random.Random(options.seed)
    start = time.monotonic()
    runs = answered = 0
    refused = {}
    slowest = (0.0, "")
    while runs < options.runs and time.monotonic() - start < options.seconds:
        what, call = one_call(rng)
        if options.verbose:
            print(f"#{runs} {what}", file=sys.stderr, flush=True)
        began = time.monotonic()
        failure = None
        try:
            result = call()
            if isinstance(result, vramfit.Result):
                exercise(result)
            answered += 1
        except ANSWERED as e:
            kind = type(e).__name__
            refused[kind] = refused.get(kind, 0) + 1
            message = str(e)
            if "\n" in message or "\r" in message or not message.strip():
                failure = f"a message that is not one line: {message!r}"
        except Exception:  # pylint: disable=broad-except  (that is the point)
            failure = "an exception other than vramfit.Error, ValueError or TypeError:\n" + \
                traceback.format_exc()
        took = time.monotonic() - began
        slowest = max(slowest, (took, what))
        if took > options.timeout:
            failure = failure or f"took {took:.1f} s (--timeout {options.timeout})"
        runs += 1
        if failure:
            print(f"FAILED at run {runs} (seed {options.seed}): {what}\n{failure}",
                  file=sys.stderr)
            return 1
    elapsed = time.monotonic() - start
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(refused.items()))
    print(f"Done {runs} runs in {elapsed:.0f} s: {answered} answered, refused: {kinds}; the "
          f"slowest {slowest[0]:.2f} s: {slowest[1]:.200}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
