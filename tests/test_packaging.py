"""The wheel is what a user installs: it must carry everything the daemon needs (migrations
included), and the packages list must name every package of the source tree."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tomllib
import urllib.request
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_of_the_tree_is_in_the_wheel_list() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {
        ".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "adaptivespec").rglob("__init__.py")
    }
    assert tree <= listed
    assert {"adaptivespec.migrations", "adaptivespec.migrations.versions"} <= listed


def _wheel(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("adaptivespec", "migrations"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return next(out.glob("adaptivespec-*.whl"))


def _fresh_venv(tmp_path: Path) -> Path:
    """A new venv that sees this environment's dependencies (torch and the rest, through a .pth
    line) but not its adaptivespec: an editable install's finder is only read from a site dir."""
    home = tmp_path / "venv"
    venv.create(home, with_pip=False)
    site = next(home.glob("lib/python*/site-packages"))
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "dependencies.pth").write_text("\n".join(sorted(paths)) + "\n")
    return home


def test_the_wheel_installs_migrates_and_serves(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    home = _fresh_venv(tmp_path)
    python = home / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )
    env = {k: v for k, v in os.environ.items() if k != "ADAPTIVESPEC_MIGRATIONS"}
    env["ADAPTIVESPEC_STATE_DIR"] = str(tmp_path / "state")
    work = tmp_path / "elsewhere"  # not the source tree: nothing may be found there
    work.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import adaptivespec; print(adaptivespec.__file__)"],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert where.startswith(str(home))
    db = f"sqlite:///{tmp_path}/state.db"
    upgraded = subprocess.run(
        [str(home / "bin" / "adaptivespec"), "db", "upgrade", "--db", db],
        check=False,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert "schema at revision" in upgraded.stdout
    daemon = subprocess.Popen(
        [str(home / "bin" / "adaptivespec"), "serve", "--backend", "sim", "--db", db, "--port", "0"],
        cwd=work,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert daemon.stderr is not None
        for line in daemon.stderr:
            if "listening on http://" in line:
                address = line.split("http://", 1)[1].strip()
                break
        else:
            pytest.fail("the daemon exited before it listened")
        with urllib.request.urlopen(f"http://{address}/health", timeout=30) as reply:
            assert reply.status == 200
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert daemon.returncode == 0
