"""The wheel as users install it: one top-level package, next to an application's own modules;
a light import; and the one line that names the extra a feature needs.

The wheel is the one ``scripts/check-wheel.sh`` built into ``dist/`` (CI runs it before the
tests), when it is newer than the sources; else it is built here. It is installed into a clean
virtual environment, with no dev dependency and no extra, next to an application that has a
``gateway`` module of its own (a common name in service code).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.support.processes import REPO_ROOT, run_bounded

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

EXTRAS_MODULES = ("uvicorn", "httptools", "uvloop", "redis", "cel", "opentelemetry", "mcp")


def _sources_mtime() -> float:
    files = [REPO_ROOT / "pyproject.toml", *(REPO_ROOT / "mcp_edge").rglob("*.py")]
    return max(f.stat().st_mtime for f in files)


def _wheel(tmp: Path) -> Path:
    built = sorted((REPO_ROOT / "dist").glob("mcp_edge-*.whl"))
    if built and built[-1].stat().st_mtime >= _sources_mtime():
        return built[-1]
    subprocess.run(
        ["uv", "build", "--wheel", "--quiet", "--out-dir", str(tmp)],
        cwd=REPO_ROOT,
        check=True,
        timeout=120,
    )
    return next(tmp.glob("mcp_edge-*.whl"))


class Installed:
    def __init__(self, wheel: Path, venv: Path, app_dir: Path) -> None:
        self.wheel = wheel
        self.bin = venv / "bin"
        self.app_dir = app_dir

    def python(self, code: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "python"), "-c", textwrap.dedent(code)],
            cwd=self.app_dir,  # the application's directory: its own modules come first
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": os.environ["PATH"], "HOME": str(self.app_dir), **env},
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    require(shutil.which("uv") is not None, "uv (builds the wheel and its clean environment)")
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = _wheel(tmp)
    venv = tmp / "venv"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
    }
    subprocess.run(
        ["uv", "venv", "--quiet", "--python", py, str(venv)], check=True, timeout=120, env=env
    )
    subprocess.run(
        ["uv", "pip", "install", "--quiet", str(wheel)],
        check=True,
        timeout=300,
        env={**env, "VIRTUAL_ENV": str(venv)},
    )
    app_dir = tmp / "app"
    app_dir.mkdir()
    (app_dir / "gateway.py").write_text("X = 1  # the application's own module\n")
    yield Installed(wheel, venv, app_dir)


def test_the_wheel_holds_one_top_level_package(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"mcp_edge", f"{installed.wheel.name.split('-py3')[0]}.dist-info"}, tops


def test_an_apps_own_gateway_module_and_mcp_edge_import_side_by_side(
    installed: Installed, state_key: str
) -> None:
    done = installed.python(
        """
        import traceback
        import gateway
        import mcp_edge
        from mcp_edge import Edge, EdgeConfigError, __version__

        async def app(scope, receive, send):
            pass

        try:
            Edge(app, env={})
        except EdgeConfigError as exc:
            shown = repr(exc) + "\\n" + "".join(traceback.format_exception(exc))
        print(gateway.X, __version__)
        print(repr(EdgeConfigError))
        print(shown)
        """
    )
    assert done.returncode == 0, done.stderr
    first, error_class, *shown = done.stdout.splitlines()
    assert first.startswith("1 ")
    assert error_class == "<class 'mcp_edge.server.embed.EdgeConfigError'>"
    text = "\n".join(shown)
    assert "mcp_edge.server.embed.EdgeConfigError: no authentication mode" in text
    assert "/mcp_edge/" in text and "/gateway" not in text


def test_a_light_edge_loads_nothing_it_does_not_use(installed: Installed, state_key: str) -> None:
    done = installed.python(
        """
        import importlib.util, json, sys
        from mcp_edge import Edge

        async def app(scope, receive, send):
            pass

        Edge(app, anonymous=True)
        print(json.dumps({
            "installed": [m for m in MODULES if importlib.util.find_spec(m) is not None],
            "loaded": sorted({m.split(".")[0] for m in sys.modules}),
        }))
        """.replace("MODULES", repr(EXTRAS_MODULES)),
        MCP_EDGE_STATE_KEYS=state_key,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["installed"] == []  # no extra comes with `pip install mcp-edge`
    # Installed (dependencies of the library) but not used by this configuration:
    assert {"aiohttp", "jwt", "limits", "yaml"}.isdisjoint(report["loaded"]), report["loaded"]


@pytest.mark.parametrize(
    ("options", "extra"),
    [
        ({"store": {"type": "redis", "url": "redis://127.0.0.1:6379/0"}}, "redis"),
        (
            {"routes": [{"name": "r", "policy": {"rules": [{"when": "true", "action": "allow"}]}}]},
            "cel",
        ),
        ({"observability": {"tracing": {"enabled": True}}}, "tracing"),
    ],
)
def test_a_feature_without_its_extra_is_refused_in_one_line_naming_it(
    installed: Installed, state_key: str, options: dict[str, object], extra: str
) -> None:
    done = installed.python(
        f"""
        from mcp_edge import Edge, EdgeConfigError

        async def app(scope, receive, send):
            pass

        try:
            Edge(app, anonymous=True, **{options!r})
        except EdgeConfigError as exc:
            print(exc)
        """,
        MCP_EDGE_STATE_KEYS=state_key,
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert f"pip install 'mcp-edge[{extra}]'" in line, line


def test_commands_without_their_extra_say_which_in_one_line(
    installed: Installed, state_key: str
) -> None:
    config = installed.app_dir / "sidecar.yaml"
    config.write_text("auth: {mode: anonymous}\nroutes: [{upstream: 'http://127.0.0.1:9/mcp'}]\n")
    env = {"MCP_EDGE_STATE_KEYS": state_key, "HOME": str(installed.app_dir)}
    cli = str(installed.bin / "mcp-edge")
    for argv, extra in (
        ([cli, "serve", "--anonymous", "--upstream", "http://127.0.0.1:9/mcp"], "serve"),
        ([cli, "check-config", "--config", str(config)], "serve"),
        ([cli, "demo", "--port", "0"], "demo"),
    ):
        done = run_bounded(argv, timeout=60, env=env, cwd=installed.app_dir)
        lines = [
            line for line in done.output.splitlines() if not line.startswith("mcp-edge: warning")
        ]
        assert done.returncode == 2, done.output
        assert len(lines) == 1 and f"mcp-edge[{extra}]" in lines[0], done.output
