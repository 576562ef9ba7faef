"""deploy/build-wheel.sh: the same sdist gives the same wheel, byte for byte, wherever it
is unpacked and whenever it is built (issue 29: pyspark and gunicorn-h1c, built from
sdists, differed from build to build, so a second clone rebuilt the api and statissa
images although nothing had changed).

Built here from a small sdist with a C extension, whose debug information names the
directory it was compiled in, the way gunicorn-h1c's does; a plain pip build of it is
shown to differ, so the test can tell.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_WHEEL = REPO / "deploy" / "build-wheel.sh"

pytestmark = pytest.mark.slow  # a C compiler, and the pinned backend from the index once

SETUP = """\
from setuptools import Extension, setup
setup(name="reprotest", version="1.0", ext_modules=[Extension("reprotest", ["reprotest.c"])])
"""
SOURCE = """\
#include <Python.h>
static const char *where = __FILE__;
static PyObject *here(PyObject *self, PyObject *args) { return PyUnicode_FromString(where); }
static PyMethodDef methods[] = {{"here", here, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "reprotest", NULL, -1, methods};
PyMODINIT_FUNC PyInit_reprotest(void) { return PyModule_Create(&module); }
"""


def _sdist(tmp_path: Path) -> Path:
    root = tmp_path / "src" / "reprotest-1.0"
    root.mkdir(parents=True)
    (root / "setup.py").write_text(SETUP)
    (root / "reprotest.c").write_text(SOURCE)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    sdist = tmp_path / "reprotest-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(root, arcname="reprotest-1.0")
    return sdist


def _sha(directory: Path) -> str:
    (wheel,) = directory.glob("*.whl")
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


def test_an_sdist_gives_the_same_wheel_every_time(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler (gcc): .ci/run installs it")
    sdist = _sdist(tmp_path)
    env = {**os.environ, "ZOSCII_WHEEL_CACHE": str(tmp_path / "cache")}
    for run in ("one", "two"):  # each unpacks into a directory of its own
        subprocess.run([str(BUILD_WHEEL), str(sdist), str(tmp_path / run)], env=env, check=True)
    assert _sha(tmp_path / "one") == _sha(tmp_path / "two")

    # Without what build-wheel.sh holds still, the same backend gives other bytes.
    (backend,) = (p for p in (tmp_path / "cache").glob("backend-*") if p.is_dir())  # not its .lock
    for run in ("three", "four"):
        unpacked = tmp_path / f"unpacked-{run}"
        with tarfile.open(sdist) as tar:
            tar.extractall(unpacked, filter="data")
        subprocess.run(
            [str(backend / "bin" / "pip"), "wheel", "-q", "--no-deps", "--no-build-isolation",
             "-w", str(tmp_path / run), str(unpacked / "reprotest-1.0")],
            check=True,
        )  # fmt: skip
    assert _sha(tmp_path / "three") != _sha(tmp_path / "four")
