"""Deployment artefacts: the Dockerfile, the Kubernetes manifests (kustomize base and overlays),
the compose stack with its nginx config, and the commands written in deploy/README.md.

The manifests are rendered with ``kubectl kustomize`` and every rendered document is validated
offline, in strict mode, against the Kubernetes JSON schemas bundled by ``kubernetes-validate``.
Without kubectl those tests skip, unless REQUIRE_ALL=1 (then they fail)."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
COMPOSE_DIR = DEPLOY / "compose"
DOCKERFILE = REPO / "Dockerfile"
README = DEPLOY / "README.md"

#: Kubernetes versions to validate against: the oldest the manifests support (native preStop
#: ``sleep`` needs 1.30) and a recent one bundled by kubernetes-validate.
K8S_VERSIONS = ("1.30", "1.37")

CONFIG_PATH = "/etc/mcp-edge/config.yaml"
KEYS_DIR = "/etc/mcp-edge/keys"
GATEWAY_IMAGE = "registry.example.com/mcp-edge"

#: The base ConfigMap's config.yaml, exactly.
BASE_CONFIG = {
    "gateway": {"id": "mcp-edge", "public_url": "https://mcp.example.com"},
    "listen": {"host": "0.0.0.0", "port": 8080},
    "cluster": {"listen": {"port": 9090}},
    "admin": {"listen": {"port": 9100}},
    "state": {"key_files": ["/etc/mcp-edge/keys/state-keys"], "ttl_seconds": 600},
    "auth": {"mode": "anonymous"},
    "routes": [{"name": "default", "path": "/mcp", "upstream": "http://mcp-server:8000/mcp"}],
}

OVERLAYS = sorted(p.parent.name for p in (K8S / "overlays").glob("*/kustomization.yaml"))
KUSTOMIZATIONS = {"base": K8S / "base", **{name: K8S / "overlays" / name for name in OVERLAYS}}


def _require(tool: str, path: str | None) -> str:
    if path:
        return path
    message = f"{tool} is not installed"
    if os.environ.get("REQUIRE_ALL") == "1":
        pytest.fail(message + " (REQUIRE_ALL=1)")
    pytest.skip(message)


# ================================================================ Dockerfile


@dataclass
class Instruction:
    keyword: str  # upper case
    flags: list[str]  # leading --name=value options
    args: str  # the rest, continuation lines joined
    line: int

    def exec_form(self) -> list[str] | None:
        if self.args.startswith("["):
            try:
                value = json.loads(self.args)
            except ValueError:
                return None
            return value if isinstance(value, list) else None
        return None

    def words(self) -> list[str]:
        return self.exec_form() or shlex.split(self.args)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """A small Dockerfile parser: comments, ``\\`` continuations, flags, stages, global ARGs."""
    logical: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue  # comment lines (inside continuations too) and blank lines
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped)
        logical.append((start, " ".join(part for part in buf if part)))
        buf = []
    assert not buf, "Dockerfile ends inside a line continuation"

    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for number, line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        flags = []
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            flags.append(flag)
            rest = rest.strip()
        inst = Instruction(keyword, flags, rest, number)
        if keyword == "FROM":
            words = rest.split()
            image = re.sub(
                r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)), words[0]
            )
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(image, name))
        elif not stages:
            assert keyword == "ARG", f"line {number}: only ARG may precede the first FROM"
            arg_name, _, default = rest.partition("=")
            global_args[arg_name] = default
        else:
            stages[-1].instructions.append(inst)
    return global_args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    _, parsed = parse_dockerfile(DOCKERFILE.read_text())
    return parsed


@pytest.fixture(scope="module")
def final(stages: list[Stage]) -> Stage:
    return stages[-1]


def dockerfile_cmd(final: Stage) -> list[str]:
    cmd = final.last("CMD")
    assert cmd is not None and cmd.exec_form(), "final stage needs an exec-form CMD"
    return cmd.exec_form()


def test_dockerfile_is_multi_stage_on_slim_python(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    names = [s.name for s in stages]
    assert len(set(names)) == len(names), "stage names must be unique"
    for stage in stages:
        match = re.fullmatch(r"python:3\.(\d+)-slim(-\w+)?", stage.base)
        assert match, f"stage {stage.name}: base image {stage.base} is not a slim Python image"
        assert int(match.group(1)) >= 11
    assert stages[0].base == stages[-1].base, "the venv's interpreter must exist in the final stage"


def test_dockerfile_build_stage_syncs_frozen_without_dev(stages: list[Stage]) -> None:
    build = stages[0]
    runs = [r.args for r in build.all("RUN")]
    assert any(re.search(r"pip install .*\buv\b", r) for r in runs), (
        "uv must come from PyPI via pip"
    )
    syncs = [r for r in runs if "uv sync" in r]
    assert syncs, "build stage must run uv sync"
    for sync in syncs:
        assert "--frozen" in sync and "--no-dev" in sync, sync
    assert "--no-editable" in syncs[-1], "the app is installed into the venv, not linked to sources"
    # The image runs `mcp-edge serve`: its server and every feature a configuration may name.
    extras = " ".join(a.args for a in build.all("ARG") if a.args.startswith("EXTRAS="))
    for extra in ("serve", "redis", "tracing", "cel", "identity"):
        assert f"--extra {extra}" in extras, extras
    assert all("${EXTRAS}" in sync for sync in syncs), syncs
    env = " ".join(e.args for e in build.all("ENV"))
    assert "UV_PYTHON_DOWNLOADS=never" in env, "uv must use the base image's Python"


def test_dockerfile_final_stage_is_runtime_only(stages: list[Stage], final: Stage) -> None:
    build_names = {s.name for s in stages[:-1]}
    copies = final.all("COPY") + final.all("ADD")
    assert copies, "final stage must copy the venv"
    for copy in copies:
        sources = [f for f in copy.flags if f.startswith("--from=")]
        assert sources and sources[0].split("=", 1)[1] in build_names, (
            f"line {copy.line}: the final stage copies only from the build stage"
        )
        assert "/etc/mcp-edge" not in copy.args, "config and keys are mounted, never baked in"
        assert not re.search(r"\buv\b", copy.args.replace(".venv", "")), "no uv in the final image"
    venv_copy = " ".join(c.args for c in copies)
    assert ".venv" in venv_copy

    build_tools = re.compile(
        r"\b(build-essential|gcc|g\+\+|clang|make|cmake|python3?-dev|libc6?-dev)\b"
    )
    for run in final.all("RUN"):
        installs = re.search(r"\b(apt-get|apt|apk)\b.*\b(install|add)\b", run.args)
        assert not (installs and build_tools.search(run.args)), (
            f"line {run.line}: build tools in the final stage"
        )
        assert not re.search(r"\bpip3? install\b", run.args), (
            f"line {run.line}: pip in the final stage"
        )
        assert "uv " not in run.args, f"line {run.line}: uv in the final stage"


def test_dockerfile_final_stage_runs_as_non_root(final: Stage) -> None:
    user = final.last("USER")
    assert user is not None, "final stage must set USER"
    uid = user.args.split(":")[0]
    assert uid.isdigit(), "numeric uid, so Kubernetes runAsNonRoot can verify it"
    assert int(uid) == 10001
    instructions = final.instructions
    assert instructions.index(user) > max(instructions.index(i) for i in final.all("RUN")), (
        "USER comes after the last RUN"
    )


def test_dockerfile_healthcheck_entrypoint_and_port(final: Stage) -> None:
    health = final.last("HEALTHCHECK")
    assert health is not None, "final stage needs a HEALTHCHECK"
    assert health.args.startswith("CMD ")
    rest = health.args[len("CMD ") :].strip()
    command = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
    assert command[0] in ("python", "python3"), "the health check uses Python, not curl/wget"
    assert "/healthz" in " ".join(command)
    assert not re.search(r"\b(curl|wget)\b", health.args)

    entrypoint = final.last("ENTRYPOINT")
    assert entrypoint is not None and entrypoint.exec_form() == ["mcp-edge"]
    assert dockerfile_cmd(final) == ["serve", "--config", CONFIG_PATH]

    expose = final.last("EXPOSE")
    assert expose is not None and expose.args.split()[0].split("/")[0] == "8080"


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a path matches if it or a parent does."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        variants = {pattern, pattern.removeprefix("**/")}
        if any(fnmatch(c, v) for c in candidates for v in variants):
            excluded = not negate
    return excluded


def test_dockerignore_sends_only_what_the_build_copies(stages: list[Stage]) -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    for stage in stages:
        for copy in stage.all("COPY"):
            if any(f.startswith("--from=") for f in copy.flags):
                continue
            *sources, _dest = copy.words()
            for source in sources:
                assert (REPO / source).exists(), f"COPY source {source} missing"
                assert not _dockerignored(source, patterns), (
                    f"{source} is excluded by .dockerignore"
                )
                if (REPO / source).is_dir():
                    assert not _dockerignored(f"{source}/__init__.py", patterns)
    for private in (
        ".git/config",
        ".venv/bin/python",
        "tests/servers/everything.py",
        "deploy/kubernetes/base/secrets/state-keys",
        "gateway/__pycache__/x.pyc",
    ):
        assert _dockerignored(private, patterns), f"{private} must not reach the build context"


# ================================================================ deploy/README.md commands


def _readme_shell_commands(tool: str) -> list[list[str]]:
    """Every ``docker <tool> ...`` command in the README's shell blocks, as argv lists."""
    text = README.read_text()
    blocks = re.findall(r"```(?:sh|bash|shell|console)\n(.*?)```", text, re.DOTALL)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            for match in re.finditer(rf"\bdocker {tool}\b", line):
                rest = line[match.start() :]
                if line[: match.start()].endswith("$("):
                    rest = rest[: rest.index(")")]
                lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                tokens = list(lexer)
                argv = []
                for token in tokens:
                    if token in ("&&", "||", ";", "|", ">", ">>", "<", ")", "#"):
                        break
                    argv.append(token)
                commands.append(argv)
    return commands


RUN_OPTIONS_WITH_VALUE = {
    "-p",
    "--publish",
    "-v",
    "--volume",
    "-e",
    "--env",
    "--env-file",
    "--name",
    "--mount",
    "-u",
    "--user",
    "--tmpfs",
    "--add-host",
    "--network",
    "-w",
    "--workdir",
    "--entrypoint",
    "--platform",
    "-l",
    "--label",
}


def _parse_docker_run(argv: list[str]) -> tuple[dict[str, list[str]], str, list[str]]:
    assert argv[:2] == ["docker", "run"]
    options: dict[str, list[str]] = {}
    i = 2
    while i < len(argv) and argv[i].startswith("-"):
        name, eq, value = argv[i].partition("=")
        if not eq and name in RUN_OPTIONS_WITH_VALUE:
            i += 1
            value = argv[i]
        options.setdefault(name, []).append(value)
        i += 1
    return options, argv[i], argv[i + 1 :]


def _readme_image_tag() -> str:
    builds = _readme_shell_commands("build")
    assert builds, "deploy/README.md shows how to build the image"
    tags = set()
    for argv in builds:
        tag_index = argv.index("-t") if "-t" in argv else argv.index("--tag")
        tags.add(argv[tag_index + 1])
        assert argv[-1] == ".", "the build context is the repository root"
        if "-f" in argv:
            assert argv[argv.index("-f") + 1] == "Dockerfile"
    assert len(tags) == 1, f"one image tag throughout the README, got {tags}"
    return tags.pop()


def test_readme_docker_build_uses_the_root_dockerfile() -> None:
    assert _readme_image_tag().startswith("mcp-edge:")


def test_readme_docker_run_matches_image_entrypoint_and_paths(final: Stage) -> None:
    tag = _readme_image_tag()
    cmd = dockerfile_cmd(final)
    port = final.last("EXPOSE").args.split()[0]
    runs = _readme_shell_commands("run")
    assert runs, "deploy/README.md shows how to run the image"
    for argv in runs:
        options, image, args = _parse_docker_run(argv)
        assert image == tag, f"{' '.join(argv)}: runs {image}, the README builds {tag}"
        assert "--entrypoint" not in options, "the image's ENTRYPOINT (mcp-edge) is used as is"
        assert not args or args[0] in ("serve", "keys"), (
            f"{' '.join(argv)}: arguments go to mcp-edge, so they start with a subcommand"
        )
        if "--config" in args:
            assert args[args.index("--config") + 1] == CONFIG_PATH
        targets = []
        for volume in options.get("-v", []) + options.get("--volume", []):
            target = volume.split(":")[1]
            targets.append(target)
            assert target in (CONFIG_PATH, KEYS_DIR) or target.startswith(KEYS_DIR + "/"), target
        if not args:  # the image's CMD: serve --config /etc/mcp-edge/config.yaml
            assert cmd[cmd.index("--config") + 1] in targets, (
                "the default CMD needs the config mounted"
            )
        for publish in options.get("-p", []) + options.get("--publish", []):
            assert publish.split(":")[-1] == port
        if args[:1] == ["serve"] and "--port" in args:
            assert args[args.index("--port") + 1] == port


def test_readme_states_the_dockerfile_entrypoint_and_cmd(final: Stage) -> None:
    text = README.read_text()
    assert 'ENTRYPOINT ["mcp-edge"]' in text
    stated = re.search(r"CMD (\[[^\]]*\])", text)
    assert stated and json.loads(stated.group(1)) == dockerfile_cmd(final)


# ================================================================ Kubernetes

_rendered: dict[str, list[dict[str, Any]]] = {}


def _kubectl_path() -> str | None:
    return shutil.which("kubectl") or (
        "/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None
    )


def render(name: str) -> list[dict[str, Any]]:
    if name not in _rendered:
        kubectl = _require("kubectl", _kubectl_path())
        proc = subprocess.run(
            [kubectl, "kustomize", str(KUSTOMIZATIONS[name])],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, f"kubectl kustomize {name} failed:\n{proc.stderr}"
        _rendered[name] = [d for d in yaml.safe_load_all(proc.stdout) if d]
    return _rendered[name]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def gateway_deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment", "mcp-edge")


def gateway_container(pod: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in pod["containers"] if c["image"].split(":")[0] == GATEWAY_IMAGE]
    assert len(found) == 1, "exactly one gateway container per pod"
    return found[0]


def rendered_config(docs: list[dict[str, Any]], pod: dict[str, Any]) -> dict[str, Any]:
    """The config.yaml the gateway container reads at CONFIG_PATH."""
    mount = next(m for m in gateway_container(pod)["volumeMounts"] if m["mountPath"] == CONFIG_PATH)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    configmap = one(docs, "ConfigMap", volume["configMap"]["name"])
    return yaml.safe_load(configmap["data"][mount.get("subPath", "config.yaml")])


def resolve_port(container: dict[str, Any], port: int | str) -> int | None:
    for p in container.get("ports", []):
        if port in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    return None


def test_every_overlay_is_covered() -> None:
    assert {"shared-gateway", "sidecar"} <= set(OVERLAYS)


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_kustomize_renders(name: str) -> None:
    docs = render(name)
    kinds = {d["kind"] for d in docs}
    assert {
        "Deployment",
        "Service",
        "ConfigMap",
        "Secret",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
    } <= kinds
    for doc in docs:
        assert doc.get("apiVersion") and doc["metadata"].get("name")


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_manifests_validate_against_kubernetes_schemas(name: str, version: str) -> None:
    import kubernetes_validate

    errors = []
    for doc in render(name):
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{where}: {path}: {exc.message}")
        except (
            kubernetes_validate.SchemaNotFoundError,
            kubernetes_validate.InvalidSchemaError,
        ) as exc:
            errors.append(f"{where}: {exc.message}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_pod_is_hardened(name: str) -> None:
    pod = gateway_deployment(render(name))["spec"]["template"]["spec"]
    pod_sc = pod["securityContext"]
    assert pod_sc["runAsNonRoot"] is True
    assert pod_sc["runAsUser"] != 0
    assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc.get("runAsNonRoot", pod_sc["runAsNonRoot"]) is True, container["name"]
        assert sc["readOnlyRootFilesystem"] is True, container["name"]
        assert sc["allowPrivilegeEscalation"] is False, container["name"]
        assert sc["capabilities"]["drop"] == ["ALL"], container["name"]
        assert not sc["capabilities"].get("add"), container["name"]
        assert sc.get("seccompProfile", pod_sc["seccompProfile"])["type"] == "RuntimeDefault"
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]), container["name"]
        assert "memory" in resources["limits"], container["name"]


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_gateway_container_probes_and_image_contract(name: str, final: Stage) -> None:
    docs = render(name)
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    gateway = gateway_container(pod)
    port = resolve_port(gateway, "public")
    assert port == int(final.last("EXPOSE").args.split()[0])
    admin = listener_ports(docs, pod)["admin"]

    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe"):
        assert gateway[probe]["httpGet"]["port"] == "admin"
        assert resolve_port(gateway, gateway[probe]["httpGet"]["port"]) == admin

    assert "command" not in gateway, "the image's ENTRYPOINT (mcp-edge) is used"
    assert gateway.get("args", dockerfile_cmd(final)) == dockerfile_cmd(final)

    config = rendered_config(docs, pod)
    assert config["listen"]["port"] == port
    # A Service named mcp-edge would inject MCP_EDGE_PORT=tcp://..., read as listen.port.
    assert pod["enableServiceLinks"] is False

    annotations = gateway_deployment(docs)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == admin
    assert annotations["prometheus.io/path"] == "/metrics"


def listener_ports(docs: list[dict[str, Any]], pod: dict[str, Any]) -> dict[str, int]:
    """Each listener's port, as the gateway reads its rendered config (role -> port)."""
    from mcp_edge.server.config import GatewayConfig

    config = GatewayConfig.model_validate(rendered_config(docs, pod))
    return {item.role: item.port for item in config.listeners()}


def gateway_pod_labels(docs: list[dict[str, Any]]) -> dict[str, str]:
    return gateway_deployment(docs)["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_each_listener_has_a_named_container_port(name: str) -> None:
    """Three listeners (public, cluster, admin), each a container port named for its role, and
    the replicas advertise their cluster port to each other (how a parked call is found)."""
    docs = render(name)
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    gateway = gateway_container(pod)
    ports = listener_ports(docs, pod)
    assert set(ports) == {"public", "cluster", "admin"} and len(set(ports.values())) == 3
    assert {p["name"]: p["containerPort"] for p in gateway["ports"]} == ports
    env = {e["name"]: e.get("value") for e in gateway.get("env", [])}
    advertised = urlsplit(env["MCP_EDGE_ADVERTISE_URL"])
    assert (advertised.netloc, advertised.port) == (
        f"$(POD_IP):{ports['cluster']}",
        ports["cluster"],
    )


def gateway_services(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    labels = gateway_pod_labels(docs)
    return [
        d
        for d in docs
        if d["kind"] == "Service"
        and d["spec"].get("selector")
        and d["spec"]["selector"].items() <= labels.items()
    ]


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_services_expose_the_public_listener_only(name: str) -> None:
    docs = render(name)
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    gateway = gateway_container(pod)
    public = listener_ports(docs, pod)["public"]
    services = gateway_services(docs)
    assert [s["metadata"]["name"] for s in services] == ["mcp-edge"]
    for service in services:
        assert [resolve_port(gateway, p["targetPort"]) for p in service["spec"]["ports"]] == [
            public
        ]


def _peers(rule: dict[str, Any]) -> list[dict[str, Any]]:
    return rule.get("from", [])


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_network_policy_opens_each_listener_to_its_own_callers(name: str) -> None:
    """public: any pod of the namespace; cluster: the gateway pods alone; admin: Prometheus in
    the monitoring namespace; no other port of the pod (a sidecar server's) to anyone."""
    docs = render(name)
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    gateway = gateway_container(pod)
    ports = listener_ports(docs, pod)
    labels = gateway_pod_labels(docs)
    policies = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy"
        and d["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    ]
    assert len(policies) == 1, "one NetworkPolicy for the gateway pods"
    spec = policies[0]["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    opened: dict[int, list[dict[str, Any]]] = {}
    for rule in spec["ingress"]:
        assert rule.get("ports"), "a rule without ports would open every port"
        assert rule.get("from"), "a rule without sources would open its ports to everyone"
        for item in rule["ports"]:
            assert item.get("protocol", "TCP") == "TCP"
            port = resolve_port(gateway, item["port"])
            assert port is not None, f"{item['port']} is no port of the gateway container"
            assert port not in opened, f"port {port} in two rules"
            opened[port] = _peers(rule)
    assert set(opened) == set(ports.values())
    assert opened[ports["public"]] == [{"podSelector": {}}]
    assert opened[ports["cluster"]] == [
        {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": labels["app.kubernetes.io/name"],
                    "app.kubernetes.io/component": labels["app.kubernetes.io/component"],
                }
            }
        }
    ]
    assert opened[ports["admin"]] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]


PROMETHEUS_COMPONENT = K8S / "components" / "prometheus"


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_pod_monitor_scrapes_the_admin_listener(name: str, tmp_path: Path) -> None:
    """Each overlay with the prometheus component: the PodMonitor scrapes the admin port."""
    kubectl = _require("kubectl", _kubectl_path())
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(KUSTOMIZATIONS[name], tmp_path)],
                "components": [os.path.relpath(PROMETHEUS_COMPONENT, tmp_path)],
            }
        )
    )
    proc = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    monitor = one(docs, "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= gateway_pod_labels(docs).items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "admin" and endpoint["path"] == "/metrics"
    assert (
        resolve_port(gateway_container(pod), endpoint["port"]) == listener_ports(docs, pod)["admin"]
    )


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_grace_period_covers_prestop_and_drain(name: str) -> None:
    from mcp_edge.edge.config import ListenSection

    docs = render(name)
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    gateway = gateway_container(pod)
    listen = ListenSection.model_validate(rendered_config(docs, pod)["listen"])
    pre_stop = gateway.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    assert pod["terminationGracePeriodSeconds"] > pre_stop + listen.drain_seconds


def runs_local_servers(docs: list[dict[str, Any]], pod: dict[str, Any]) -> bool:
    return any(isinstance(r.get("upstream"), dict) for r in rendered_config(docs, pod)["routes"])


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_key_ring_secret_is_mounted(name: str) -> None:
    docs = render(name)
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    if runs_local_servers(docs, pod):
        assert_key_ring_in_the_environment(docs, pod)
        return
    mount = next(m for m in gateway_container(pod)["volumeMounts"] if m["mountPath"] == KEYS_DIR)
    assert mount.get("readOnly") is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    secret = one(docs, "Secret", volume["secret"]["secretName"])
    assert secret["metadata"]["name"].startswith("mcp-edge-state-keys")
    key_files = rendered_config(docs, pod)["state"]["key_files"]
    assert key_files
    for path in key_files:
        directory, _, filename = path.rpartition("/")
        assert directory == KEYS_DIR and filename in secret["data"], path


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_config_and_keys_are_readable_by_the_gateway_alone(name: str) -> None:
    """The gateway refuses a key file (and, when it runs local servers, a config file) that other
    users can read: volumes are mounted 0440 for the pod's fsGroup, which is the gateway's group."""
    docs = render(name)
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    sc = pod["securityContext"]
    assert sc["fsGroup"] == sc["runAsGroup"]
    mounted = {m["name"] for m in gateway_container(pod)["volumeMounts"]}
    for volume in pod["volumes"]:
        source = volume.get("configMap") or volume.get("secret")
        if source is not None and volume["name"] in mounted:
            assert source.get("defaultMode", 0o644) & 0o007 == 0, volume["name"]


def test_sidecar_stdio_keeps_the_key_ring_out_of_the_servers_reach() -> None:
    docs = render("sidecar-stdio")
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    assert runs_local_servers(docs, pod)
    assert_key_ring_in_the_environment(docs, pod)


def assert_key_ring_in_the_environment(docs: list[dict[str, Any]], pod: dict[str, Any]) -> None:
    """A local server runs as the gateway's user in a pod and could read any file the gateway
    can: the ring comes from the Secret as MCP_EDGE_STATE_KEYS (closed to it: the gateway is
    non-dumpable) and is mounted nowhere."""
    gateway = gateway_container(pod)
    assert KEYS_DIR not in {m["mountPath"] for m in gateway["volumeMounts"]}
    assert not [v for v in pod["volumes"] if "secret" in v]
    ref = next(e for e in gateway["env"] if e["name"] == "MCP_EDGE_STATE_KEYS")["valueFrom"][
        "secretKeyRef"
    ]
    secret = one(docs, "Secret", ref["name"])
    assert (
        secret["metadata"]["name"].startswith("mcp-edge-state-keys")
        and ref["key"] in secret["data"]
    )
    assert "key_files" not in rendered_config(docs, pod)["state"]


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_config_is_accepted_by_the_gateway(name: str, tmp_path: Path) -> None:
    from mcp_edge.server.config import load_config

    docs = render(name)
    config = rendered_config(docs, gateway_deployment(docs)["spec"]["template"]["spec"])
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    loaded = load_config(str(path), env={})
    assert loaded.gateway.id == "mcp-edge"
    assert loaded.routes


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_service_pdb_and_hpa_target_the_gateway(name: str) -> None:
    docs = render(name)
    deployment = gateway_deployment(docs)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    pod = deployment["spec"]["template"]["spec"]
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"

    service = one(docs, "Service", "mcp-edge")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"].get("sessionAffinity", "None") == "None", "plain round robin"
    assert [
        resolve_port(gateway_container(pod), p["targetPort"]) for p in service["spec"]["ports"]
    ] == [resolve_port(gateway_container(pod), "public")]

    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "mcp-edge",
    }
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["maxReplicas"] >= hpa["spec"]["minReplicas"]


def test_base_config_is_the_documented_one() -> None:
    docs = render("base")
    config = rendered_config(docs, gateway_deployment(docs)["spec"]["template"]["spec"])
    assert config == BASE_CONFIG


def test_base_key_ring_is_a_placeholder_the_gateway_rejects(tmp_path: Path) -> None:
    from mcp_edge.core.seal import generate_key
    from mcp_edge.edge.config import StateSection, load_key_ring
    from mcp_edge.sections import ConfigError

    docs = render("base")
    secret = one(docs, "Secret")
    placeholder = base64.b64decode(secret["data"]["state-keys"]).decode()
    assert "REPLACE" in placeholder
    (tmp_path / "state-keys").write_text(placeholder)
    with pytest.raises(ConfigError):
        load_key_ring(StateSection(key_files=[str(tmp_path / "state-keys")]))
    # What the runbook tells operators to write: one generated key per line.
    (tmp_path / "state-keys").write_text(f"{generate_key()}\n{generate_key()}\n")
    assert len(load_key_ring(StateSection(key_files=[str(tmp_path / "state-keys")])).keys) == 2


def test_readme_private_overlay_replaces_the_key_ring(tmp_path: Path) -> None:
    """The README's private overlay renders, and the gateway mounts the ring it supplies."""
    from mcp_edge.core.seal import generate_key

    kubectl = _require("kubectl", _kubectl_path())
    match = re.search(
        r"cat > (my-overlay)/kustomization\.yaml <<'EOF'\n(.*?)\nEOF\n",
        README.read_text(),
        re.DOTALL,
    )
    assert match, "deploy/README.md shows a private overlay for the key ring"
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    overlay = tmp_path / match.group(1)
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(match.group(2) + "\n")
    ring = f"{generate_key()}\n"
    (overlay / "state-keys").write_text(ring)
    proc = subprocess.run(
        [kubectl, "kustomize", str(overlay)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    secret = one(docs, "Secret")
    assert base64.b64decode(secret["data"]["state-keys"]).decode() == ring
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if "secret" in v)
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]


def test_shared_gateway_fronts_the_mcp_server_service() -> None:
    docs = render("shared-gateway")
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    routes = rendered_config(docs, pod)["routes"]
    assert routes[0]["upstream"] == "http://mcp-server:8000/mcp"

    upstream = one(docs, "Service", "mcp-server")
    assert [p["port"] for p in upstream["spec"]["ports"]] == [8000]
    headless = [d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"]
    assert len(headless) == 1, "an example headless Service for DNS endpoints"
    assert headless[0]["spec"]["selector"] == upstream["spec"]["selector"]
    assert [p["port"] for p in headless[0]["spec"]["ports"]] == [8000]


def test_shared_gateway_headless_example_is_a_valid_route(tmp_path: Path) -> None:
    """The commented ``dns: true`` route in the overlay's config.yaml works once uncommented."""
    from mcp_edge.server.config import load_config

    text = (K8S / "overlays" / "shared-gateway" / "config.yaml").read_text()
    example = [ln.replace("#", "", 1) for ln in text.splitlines() if re.match(r"^  #(- |  )", ln)]
    assert example, "config.yaml carries a commented headless-Service route"
    config = yaml.safe_load(text)
    config["routes"] = yaml.safe_load("\n".join(example))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    route = load_config(str(tmp_path / "config.yaml"), env={}).routes[0]
    assert route.dns is True
    headless = one(render("shared-gateway"), "Service", urlsplit(route.upstream).hostname)
    assert headless["spec"]["clusterIP"] == "None"
    assert urlsplit(route.upstream).port in [p["port"] for p in headless["spec"]["ports"]]


def test_sidecar_runs_gateway_and_server_in_one_pod() -> None:
    docs = render("sidecar")
    assert len([d for d in docs if d["kind"] == "Deployment"]) == 1
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 2
    gateway = gateway_container(pod)
    server = next(c for c in pod["containers"] if c is not gateway)
    assert rendered_config(docs, pod)["routes"][0]["upstream"] == "http://127.0.0.1:8000/mcp"

    service = one(docs, "Service", "mcp-edge")
    assert len(service["spec"]["ports"]) == 1
    target = service["spec"]["ports"][0]["targetPort"]
    assert resolve_port(gateway, target) == 8080
    assert resolve_port(server, target) is None, "the Service must not reach the MCP server"
    assert 8000 not in [p["port"] for p in service["spec"]["ports"]]

    policy = one(docs, "NetworkPolicy")
    allowed = [
        resolve_port(gateway, p["port"])
        for rule in policy["spec"]["ingress"]
        for p in rule["ports"]
    ]
    assert 8080 in allowed and 8000 not in allowed
    assert all(
        resolve_port(server, p["port"]) is None
        for rule in policy["spec"]["ingress"]
        for p in rule["ports"]
    )


# ================================================================ compose + nginx


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load((COMPOSE_DIR / "compose.yaml").read_text())
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict)
    return doc


def _gateway_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that mount a gateway config file."""
    return {
        name: svc
        for name, svc in compose["services"].items()
        if any(str(v).split(":")[1:2] == [CONFIG_PATH] for v in svc.get("volumes", []))
    }


def _nginx_seconds(value: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    match = re.fullmatch(r"(\d+)([smh]?)", value)
    assert match, value
    return int(match.group(1)) * units.get(match.group(2) or "s", 1)


def _nginx_directives(text: str) -> list[list[str]]:
    text = re.sub(r"#[^\n]*", "", text)
    directives = []
    for statement in re.split(r"[;{}]", text):
        words = shlex.split(statement) if statement.strip() else []
        if words:
            directives.append(words)
    return directives


def test_compose_runs_three_gateways_nginx_upstream_and_redis(
    compose: dict[str, Any], final: Stage
) -> None:
    services = compose["services"]
    gateways = _gateway_services(compose)
    assert len(gateways) == 3
    tag = _readme_image_tag()
    for name, svc in gateways.items():
        assert svc["image"] == tag, name
        assert (
            COMPOSE_DIR / svc["build"]["context"] / svc["build"].get("dockerfile", "Dockerfile")
        ).resolve() == DOCKERFILE
        assert svc.get("command", dockerfile_cmd(final)) == dockerfile_cmd(final)
        assert "entrypoint" not in svc
        assert f"./config.yaml:{CONFIG_PATH}:ro" in svc["volumes"]
        assert "MCP_EDGE_STATE_KEYS" in svc["environment"]
        assert svc.get("user") in (None, "10001", "10001:10001")
    assert len({json.dumps(svc, sort_keys=True) for svc in gateways.values()}) == 1, (
        "identical replicas"
    )

    server = services["mcp-server"]
    assert server["image"] == tag
    assert server["entrypoint"] + server["command"] == [
        "python",
        "tests/servers/everything.py",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    mounts = {v.split(":")[1]: (COMPOSE_DIR / v.split(":")[0]).resolve() for v in server["volumes"]}
    assert mounts[server["working_dir"] + "/tests"] == REPO / "tests"
    assert "8000" in " ".join(server["healthcheck"]["test"]), "own health check, not the gateway's"

    assert "redis" in services and services["redis"].get("profiles"), "redis is optional"
    nginx = services["nginx"]
    assert any(v.startswith("./nginx.conf:") for v in nginx["volumes"])
    assert set(nginx["depends_on"]) == set(gateways)


def test_compose_config_routes_to_the_upstream_service(compose: dict[str, Any]) -> None:
    from mcp_edge.server.config import load_config

    config = load_config(str(COMPOSE_DIR / "config.yaml"), env={})
    assert config.listen.port == 8080
    # The health check and the scrape config use the admin listener.
    assert config.admin.listen is not None
    admin = config.admin.listen.port
    for name, svc in _gateway_services(compose).items():
        assert f"http://127.0.0.1:{admin}/healthz" in " ".join(svc["healthcheck"]["test"]), name
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = scrape["scrape_configs"]
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    assert targets == [f"{name}:{admin}" for name in sorted(_gateway_services(compose))]
    route = config.routes[0]
    assert route.upstream == "http://mcp-server:8000/mcp"
    assert "mcp-server" in compose["services"]


def test_environment_variables_are_known_to_the_gateway(compose: dict[str, Any]) -> None:
    """Every MCP_EDGE_* variable set by compose or the manifests is one the gateway reads."""
    from mcp_edge.server.config import ENV_PREFIX, ENV_VARS

    known = {ENV_PREFIX + name for name in ENV_VARS} | {
        ENV_PREFIX + name for name in ("CONFIG", "UPSTREAM", "ANONYMOUS")
    }
    used = {name for svc in compose["services"].values() for name in svc.get("environment", {})}
    if _kubectl_path():
        for name in KUSTOMIZATIONS:
            pod = gateway_deployment(render(name))["spec"]["template"]["spec"]
            used |= {e["name"] for e in gateway_container(pod).get("env", [])}
    used = {name for name in used if name.startswith(ENV_PREFIX)}
    assert used and used <= known, sorted(used - known)


def test_nginx_is_plain_round_robin_and_sse_friendly(compose: dict[str, Any]) -> None:
    directives = _nginx_directives((COMPOSE_DIR / "nginx.conf").read_text())
    names = [d[0] for d in directives]
    for forbidden in ("ip_hash", "hash", "sticky", "least_conn", "random"):
        assert forbidden not in names, f"nginx must balance plain round robin, found {forbidden}"
    settings = {d[0]: d[1:] for d in directives}
    assert settings["proxy_buffering"] == ["off"]
    assert settings["proxy_http_version"] == ["1.1"]
    assert ["proxy_set_header", "Connection", ""] in directives
    assert "keepalive" in names
    assert _nginx_seconds(settings["proxy_read_timeout"][0]) >= 300, (
        "long tool calls and quiet streams"
    )
    assert settings.get("gzip") == ["off"]

    servers = sorted(d[1] for d in directives if d[0] == "server" and len(d) > 1)
    assert servers == sorted(f"{name}:8080" for name in _gateway_services(compose))
    published = compose["services"]["nginx"]["ports"][0].split(":")[-1]
    assert settings["listen"] == [published]


def test_nginx_config_syntax(tmp_path: Path) -> None:
    nginx = _require("nginx", shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin"))
    # The compose host names do not resolve here; point them at loopback for the syntax check.
    text = re.sub(r"\bgateway-\d+:8080", "127.0.0.1:8080", (COMPOSE_DIR / "nginx.conf").read_text())
    (tmp_path / "nginx.conf").write_text(text)
    proc = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_sidecar_stdio_runs_the_server_inside_the_gateway_container(tmp_path: Path) -> None:
    """The stdio variant: one container (the gateway image with the server added), the server a
    command the gateway runs, no server port anywhere, and the pod's own address advertised for
    the calls parked in it."""
    from mcp_edge.server.config import load_config

    docs = render("sidecar-stdio")
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    gateway = gateway_container(pod)
    assert gateway["image"] == f"{GATEWAY_IMAGE}:0.1.0-stdio-fetch"
    config = rendered_config(docs, pod)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    route = load_config(str(path), env={}).routes[0]
    assert route.stdio is not None and route.stdio.command[0].startswith("/")
    assert route.upstream_urls() == [] and route.stdio.env.get("HOME") == "/tmp"
    mounts = {m["mountPath"] for m in gateway["volumeMounts"]}
    assert "/tmp" in mounts  # the server's writable HOME on a read-only root filesystem
    env = {e["name"]: e for e in gateway["env"]}
    assert (
        env["MCP_EDGE_ADVERTISE_URL"]["value"]
        == f"http://$(POD_IP):{listener_ports(docs, pod)['cluster']}"
    )
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    service = one(docs, "Service", "mcp-edge")
    assert [resolve_port(gateway, p["targetPort"]) for p in service["spec"]["ports"]] == [8080]
