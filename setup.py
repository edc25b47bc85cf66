"""The extension vramfit._vramfit for pyproject.toml: examples/python/module.cpp, compiled as
examples/python/CMakeLists.txt compiles it (C++20, Release: -O2, NDEBUG) against include/,
examples/cli/ and Debian's headers (Boost, CLI11, nlohmann-json, pybind11, toml++, yaml-cpp)."""

import re
from pathlib import Path

from setuptools import Extension, setup

root = Path(__file__).resolve().parent


def version():
    text = (root / "include/vramfit/version.hpp").read_text()
    parts = [re.search(rf"#define VRAMFIT_VERSION_{p} (\d+)", text)[1]
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def pybind11_include():
    try:  # python3-pybind11; pybind11-dev's headers are in /usr/include already
        import pybind11
        return [pybind11.get_include()]
    except ImportError:
        return []


def launcher_parsers():
    """--from's readers as examples/cli/CMakeLists.txt finds them: TOML through toml++ (header
    only) and YAML through yaml-cpp, where Debian's packages put their headers."""
    def found(header):
        return any(Path(d, header).exists() for d in ("/usr/include", "/usr/local/include"))

    macros, libraries = [], []
    if found("toml++/toml.h"):
        macros.append(("VRAMFIT_CLI_TOML", "1"))
    if found("yaml-cpp/yaml.h"):
        macros.append(("VRAMFIT_CLI_YAML", "1"))
        libraries.append("yaml-cpp")
    return macros, libraries


parser_macros, parser_libraries = launcher_parsers()
extension = Extension(
    "vramfit._vramfit",
    sources=["examples/python/module.cpp"],
    include_dirs=["include", "examples/cli", *pybind11_include()],
    define_macros=[("NDEBUG", None), *parser_macros],
    libraries=parser_libraries,
    # after the interpreter's own flags, so these win: no debug info (a smaller, quicker build)
    extra_compile_args=["-std=c++20", "-O2", "-g0", "-fvisibility=hidden"],
    language="c++",  # links with the C++ driver, and so with libstdc++
)

# setuptools' own files under build/pip (ignored by git), not build/ and examples/python/*.egg-info
work = "build/pip"
(root / work).mkdir(parents=True, exist_ok=True)
setup(version=version(), ext_modules=[extension],
      options={"build": {"build_base": work}, "egg_info": {"egg_base": work}})
