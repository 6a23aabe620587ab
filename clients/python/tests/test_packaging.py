"""clients/python builds as a wheel that holds every module."""
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
MODULES = ["__init__", "client", "errors", "verl", "trl", "slime", "_adapters", "_json",
           "_retry", "_settings", "_transport"]


def test_the_wheel_holds_every_module_and_the_metadata(tmp_path):
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed (pip install setuptools)")
    # setuptools >= 70.1 builds wheels itself; older ones need the wheel package.
    if (importlib.util.find_spec("wheel") is None
            and importlib.util.find_spec("setuptools.command.bdist_wheel") is None):
        pytest.skip("neither wheel nor setuptools >= 70.1 is installed (pip install wheel)")
    # Build from a copy: an in-tree build leaves build/ and *.egg-info behind.
    source = tmp_path / "src"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns(
        "tests", "build", "*.egg-info", "__pycache__"))
    out = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = list(out.glob("arbiter_client-0.1.0-*.whl"))
    assert len(wheels) == 1, list(out.iterdir())
    with zipfile.ZipFile(wheels[0]) as z:
        names = set(z.namelist())
        for module in MODULES:
            assert f"arbiter_client/{module}.py" in names
        assert not any(n.startswith("tests/") for n in names)
        metadata = z.read("arbiter_client-0.1.0.dist-info/METADATA").decode()
    assert "Name: arbiter-client" in metadata
    assert "Requires-Python: >=3.9" in metadata
    assert "Provides-Extra: aiohttp" in metadata
    assert "Requires-Dist: aiohttp>=3.8; extra == \"aiohttp\"" in metadata


def test_every_module_is_listed_here():
    on_disk = {p.stem for p in (PACKAGE / "arbiter_client").glob("*.py")}
    assert on_disk == set(MODULES)
