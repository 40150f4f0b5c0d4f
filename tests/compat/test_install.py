"""What the README's install section tells a new user works: ``make dist`` builds a wheel that
installs into a fresh virtual environment with nothing but strom's own dependencies, whose
``strom`` runs (``--version``, ``--help``, a command against a real broker) and says in one line
what to install for the extras; ``. .venv/bin/activate`` puts ``strom`` on PATH after ``make run``;
the README's confluent-kafka example runs as written against a broker.

The fresh environment gets strom's runtime dependencies by linking the installed ones in (so the
test needs no network beyond the wheel build's own build requirements), never pyspark or
matplotlib: exactly what ``pip install strom-*.whl`` without extras gives.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat.conftest import BrokerProcess
from tests.compat.support import unique_topic

pytestmark = [pytest.mark.compat, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 600.0
COMMAND_TIMEOUT_S = 120.0


def run(
    command: list[str], *, cwd: Path | None = None, timeout_s: float = COMMAND_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False)


def runtime_requirements() -> list[str]:
    """strom's dependencies without extras, as its installed metadata (pyproject.toml) lists them."""
    names = []
    for requirement in importlib.metadata.requires("strom") or []:
        if "extra ==" in requirement:
            continue
        names.append(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0])
    return names


def link_dependencies(names: list[str], into: Path) -> None:
    """Symlink each distribution's top-level files and directories (its packages, extension
    modules and dist-info) into ``into``."""
    into.mkdir()
    for name in names:
        distribution = importlib.metadata.distribution(name)
        top_level = {Path(str(path)).parts[0] for path in distribution.files or []}
        base = Path(str(distribution.locate_file("")))
        for entry in sorted(top_level):
            if entry in ("..", "__pycache__") or entry.endswith(".pth"):
                continue
            target = into / entry
            if not target.exists():
                target.symlink_to(base / entry)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with the wheel ``make dist`` built, installed without extras."""
    work = tmp_path_factory.mktemp("install")
    built = run(["make", "-s", "dist", f"DIST_DIR={work / 'dist'}"], cwd=ROOT, timeout_s=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.stderr
    [wheel] = sorted((work / "dist").glob("strom-*-py3-none-any.whl"))
    assert wheel.name == f"strom-{importlib.metadata.version('strom')}-py3-none-any.whl"

    venv = work / "venv"
    created = run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert created.returncode == 0, created.stderr
    [site_packages] = (venv / "lib").glob("python*/site-packages")
    link_dependencies(runtime_requirements(), work / "dependencies")
    (site_packages / "strom_test_dependencies.pth").write_text(f"{work / 'dependencies'}\n")
    installed = run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--no-deps", "--no-index", "--quiet", str(wheel)],
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    return venv


def test_the_wheel_installs_and_strom_runs_without_a_clone(
    fresh_venv: Path, shared_broker: BrokerProcess
) -> None:
    strom = str(fresh_venv / "bin" / "strom")
    located = run(
        [str(fresh_venv / "bin" / "python"), "-c", "import strom; print(strom.__file__)"], cwd=Path("/")
    )
    assert located.returncode == 0 and located.stdout.startswith(str(fresh_venv)), located

    version = run([strom, "--version"])
    assert (version.returncode, version.stdout) == (0, f"strom {importlib.metadata.version('strom')}\n")
    helped = run([strom, "--help"])
    assert helped.returncode == 0
    for command in (
        "broker",
        "topics",
        "configs",
        "produce",
        "consume",
        "groups",
        "bench",
        "log",
        "pipeline",
    ):
        assert command in helped.stdout

    topic = unique_topic("installed")
    bootstrap = ("--bootstrap-server", shared_broker.bootstrap)
    assert run([strom, "topics", "create", topic, *bootstrap]).returncode == 0
    produced = subprocess.run(
        [strom, "produce", topic, *bootstrap],
        input="from the wheel\n",
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    consumed = run([strom, "consume", topic, "--from-beginning", "--until", "end", *bootstrap])
    assert consumed.stdout == "from the wheel\n", consumed.stderr


def test_extras_that_are_missing_are_named_in_one_line(fresh_venv: Path, tmp_path: Path) -> None:
    strom = str(fresh_venv / "bin" / "strom")
    pipeline = run([strom, "pipeline", "archive", "--topics", "t", "--output", str(tmp_path / "archive")])
    assert pipeline.returncode == 1
    assert pipeline.stdout == ""
    assert pipeline.stderr.splitlines() == [
        "strom: error: strom pipeline runs on Spark, and pyspark, pyarrow are not installed: "
        "pip install pyspark pyarrow (in a clone of strom: pip install -e '.[spark]'; from a wheel: "
        "pip install 'strom-VERSION-py3-none-any.whl[spark]'); Spark needs Java 17 or newer"
    ]
    plot = run([strom, "bench", "produce", "--plot", str(tmp_path / "p.png")])
    assert plot.returncode == 1
    assert plot.stderr.splitlines() == [
        "strom: error: --plot needs matplotlib: pip install matplotlib (or, in a clone of strom, "
        "pip install -e '.[plot]')"
    ]


def test_activating_the_venv_puts_strom_on_path() -> None:
    """After ``make run`` (which makes .venv), README says: ``. .venv/bin/activate``."""
    activated = run(["bash", "-c", ". .venv/bin/activate && command -v strom && strom --version"], cwd=ROOT)
    assert activated.returncode == 0, activated.stderr
    path, version = activated.stdout.splitlines()
    assert Path(path) == ROOT / ".venv" / "bin" / "strom"
    assert version == f"strom {importlib.metadata.version('strom')}"


def test_the_readme_confluent_kafka_example_runs_as_written(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Five lines with confluent-kafka", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert (
        "pip install confluent-kafka" in section.split("```python", 1)[0]
    )  # the README says what to install
    topic = unique_topic("readme")
    script = tmp_path / "example.py"
    script.write_text(
        example.replace("localhost:9092", shared_broker.bootstrap)
        .replace('"greetings"', repr(topic))
        .replace('"demo"', repr(f"readme-{topic}"))
    )
    ran = run([sys.executable, str(script)], cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "b'hello strom'"
