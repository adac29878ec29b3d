"""The image, checked statically (no container engine runs here)."""

from __future__ import annotations

import fnmatch
import json
import re

from ._support import ROOT, find, pyproject


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for ins in _instructions():
        if ins[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def _args() -> dict[str, str]:
    args = {}
    for word, rest in _instructions():
        if word == "FROM":
            break
        if word == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            args[k] = v
    return args


def _base(from_args: str) -> str:
    image = from_args.split()[0]
    return re.sub(r"\$\{(\w+)\}", lambda m: _args()[m.group(1)], image)


def test_multi_stage_on_slim_python_311() -> None:
    stages = _stages()
    assert len(stages) >= 2
    build_from = stages[0][0][1]
    assert re.search(r"\bAS\s+build\b", build_from, re.IGNORECASE)
    for stage in stages:
        assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", _base(stage[0][1]))
    runtime = stages[-1]
    assert not any(w == "COPY" and "--from" not in r and "/src" in r for w, r in runtime)


def test_build_stage_builds_wheels_of_this_project() -> None:
    project = pyproject()
    build = _stages()[0]
    copied: set[str] = set()
    for word, rest in build:
        if word == "COPY":
            sources = rest.split()[:-1]
            copied |= {s.rstrip("/") for s in sources if not s.startswith("--")}
    # Everything `pip install .` needs: metadata, its readme, every package it finds.
    assert "pyproject.toml" in copied
    assert project["project"]["readme"] in copied
    includes = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in includes)
    }
    assert packages and packages <= copied
    runs = " ".join(rest for word, rest in build if word == "RUN")
    assert re.search(r"pip wheel .*--wheel-dir[ =](\S+) \.(\s|$)", runs)


def test_runtime_installs_the_project_from_the_wheels_only() -> None:
    name = pyproject()["project"]["name"]
    runs = " ".join(rest for word, rest in _stages()[-1] if word == "RUN")
    install = re.search(r"pip install ([^&;]*)", runs)
    assert install
    words = install.group(1).split()
    assert "--no-index" in words
    assert name in words


def test_runs_as_a_fixed_non_root_user_matching_the_chart(default_objects) -> None:
    runtime = _stages()[-1]
    users = [rest for word, rest in runtime if word == "USER"]
    assert users, "the runtime stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)
    pod = find(default_objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)


def test_entrypoint_is_the_console_script() -> None:
    runtime = _stages()[-1]
    entrypoint = [rest for word, rest in runtime if word == "ENTRYPOINT"]
    assert entrypoint and json.loads(entrypoint[-1]) == ["topo-scheduler"]
    assert "topo-scheduler" in pyproject()["project"]["scripts"]


def test_writes_no_bytecode_at_runtime() -> None:
    env = " ".join(rest for word, rest in _stages()[-1] if word == "ENV")
    assert re.search(r"\bPYTHONDONTWRITEBYTECODE=1\b", env)


def _dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    excluded = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        pattern = pattern.strip("/")
        regex = (
            re.escape(pattern).replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        )
        regex = regex.replace(".*/", "(.*/)?")
        if any(re.fullmatch(regex, p) for p in prefixes):
            excluded = not negate
    return excluded


def test_dockerignore_keeps_the_sources_and_drops_the_rest() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    sources = ["pyproject.toml", "README.md"] + [
        str(p.relative_to(ROOT))
        for pkg in ("scheduler", "plugins")
        for p in (ROOT / pkg).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ]
    kept_out = [s for s in sources if _dockerignore_excludes(s, patterns)]
    assert not kept_out
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/ship/test_dockerfile.py",
        "scheduler/__pycache__/cli.cpython-311.pyc",
        "helm/topo-scheduler/values.yaml",
    ):
        assert _dockerignore_excludes(path, patterns), path


def test_dockerignore_rule_matcher() -> None:
    assert _dockerignore_excludes("a/b.pyc", ["**/*.pyc"])
    assert not _dockerignore_excludes("a/b.py", ["**/*.pyc"])
    assert not _dockerignore_excludes("src/x.py", ["**", "!src/"])
    assert _dockerignore_excludes("src/__pycache__/x", ["**", "!src/", "**/__pycache__"])


def test_exposes_the_charts_metrics_port() -> None:
    import yaml

    values = yaml.safe_load((ROOT / "helm" / "topo-scheduler" / "values.yaml").read_text())
    exposed = [r for w, r in _instructions() if w == "EXPOSE"]
    assert exposed == [str(values["scheduler"]["port"])]
