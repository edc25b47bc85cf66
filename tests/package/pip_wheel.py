"""`pip install .` end to end, writing only under WORK: copies what pyproject.toml builds from
into WORK/src, builds a wheel there (python -m build --wheel --no-isolation), installs it into a
fresh venv, and checks that the venv's `vramfit` command and module agree byte for byte with the
CMake-built tool CLI.

usage: python3 pip_wheel.py SOURCE_DIR WORK CLI"""

import glob
import json
import os
import shutil
import subprocess
import sys

source, work, cli = sys.argv[1:4]
src, dist, venv = (os.path.join(work, d) for d in ("src", "dist", "venv"))
# The environment of every step: no PYTHONPATH into the build tree, no bytecode, no pip cache.
env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
env.update(PYTHONDONTWRITEBYTECODE="1", PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
failures = []


def run(*args, cwd=work):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, check=False)


def step(*args, cwd=work):
    done = run(*args, cwd=cwd)
    if done.returncode != 0:
        sys.exit(f"FAILED ({done.returncode}): {' '.join(args)}\n"
                 f"{done.stdout.decode(errors='replace')}{done.stderr.decode(errors='replace')}")
    return done


shutil.rmtree(work, ignore_errors=True)
# What pyproject.toml builds from (MANIFEST.in lists the same for an sdist).
for path in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "include",
             "examples/report.hpp", "examples/cli", "examples/python"):
    origin, copy = os.path.join(source, path), os.path.join(src, path)
    if os.path.isdir(origin):
        shutil.copytree(origin, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    else:
        os.makedirs(os.path.dirname(copy), exist_ok=True)
        shutil.copy(origin, copy)

step(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, src)
wheels = glob.glob(os.path.join(dist, "vramfit-*.whl"))
if len(wheels) != 1:
    sys.exit(f"FAILED: expected one wheel in {dist}, found {wheels}")
print("built", os.path.basename(wheels[0]))
step(sys.executable, "-m", "venv", "--system-site-packages", venv)
python, command = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "vramfit")
step(python, "-m", "pip", "install", "--no-index", "--no-deps", wheels[0])

# The console script against the binary: status, stdout and stderr identical. A Hub id read
# from the fixture cache (docs/getting-started.md's first command), and a torchtune YAML through
# --from (the wheel links yaml-cpp as the tool does).
env["HF_HUB_CACHE"] = os.path.join(source, "tests", "data", "hf-cache")
torchtune = os.path.join(source, "tests", "data", "from", "torchtune",
                         "llama3_1-8B_lora_single_device.yaml")
for words in (["train", "-m", "gpt2", "-f", "json"], ["train", "--model", "gpt2"],
              ["infer", "-m", "gpt2", "--gpu", "h100"], ["trian"],
              ["train", "--model", "meta-llama/Llama-3.1-8B", "-f", "json"],
              ["train", "--from", "torchtune", torchtune]):
    expected, got = run(cli, *words), run(command, *words)
    for what in ("returncode", "stdout", "stderr"):
        if getattr(expected, what) != getattr(got, what):
            failures.append(f"vramfit {' '.join(words)}: {what} differs:\n"
                            f"  tool:  {getattr(expected, what)!r:.300}\n"
                            f"  wheel: {getattr(got, what)!r:.300}")
    print(f"vramfit {' '.join(words)}: exit {got.returncode}, {len(got.stdout)} bytes")

# Both answered: Llama-3.1-8B's published count (reference/models.json), and the file's options.
hub = run(command, "train", "--model", "meta-llama/Llama-3.1-8B", "-f", "json")
if hub.returncode != 0 or json.loads(hub.stdout)["model"]["parameters"] != 8_030_261_248:
    failures.append(f"the Hub id from the fixture cache: {hub.stderr.decode()!r:.300}")
if not run(command, "train", "--from", "torchtune", torchtune).stdout.startswith(b"From torchtune"):
    failures.append("--from torchtune through the wheel printed no account of the file")

# The module, imported from the venv (cwd WORK, outside the source tree) and not from elsewhere.
module = step(python, "-c", "import os, vramfit; "
              "print(os.path.dirname(vramfit.__file__)); "
              "print(vramfit.train(model='gpt2').to_json(), end='')").stdout.decode()
where, json_text = module.split("\n", 1)
if not where.startswith(os.path.realpath(venv)) and not where.startswith(venv):
    failures.append(f"vramfit imported from {where}, not from the venv {venv}")
if json_text != run(cli, "train", "-m", "gpt2", "-f", "json").stdout.decode():
    failures.append("vramfit.train(model='gpt2').to_json() differs from the tool's -f json")
print("module: imported from", where)
# PEP 561: the wheel carries py.typed, so that type checkers read the package's annotations.
if not os.path.isfile(os.path.join(where, "py.typed")):
    failures.append(f"the wheel installed no py.typed in {where}")

if failures:
    sys.exit("FAILED\n" + "\n".join(failures))
print("pip wheel: the console script and the module agree with the tool")
