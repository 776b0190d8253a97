"""The image's requirements resolve for its platform (manylinux, x86_64, the base's glibc) and Python, wheels only,
against PyPI (metadata only: no wheel is downloaded), and torch's CUDA runtime is the base image's CUDA.

These tests need the network to PyPI (CI reaches it); without it they fail with a message that says so."""

import pytest

from tests.docker.conftest import ROOT

REQUIREMENTS = ROOT / "docker" / "requirements.txt"


@pytest.fixture(scope="module")
def target(checks, dockerfile_text):
    base = checks.base_image_pin(dockerfile_text)
    platforms = checks.manylinux_platforms(checks.DISTRO_GLIBC[checks.distro_of_tag(base.tag)])
    return base, checks.image_python_version(dockerfile_text), platforms


@pytest.fixture(scope="module")
def resolution(checks, target):
    _, python, platforms = target
    return checks.resolve(REQUIREMENTS, python, platforms)


def test_the_image_requirements_resolve_with_torch_cuda_matching_the_base(checks, target, resolution,
                                                                           requirements_text):
    base, python, platforms = target
    assert (python, platforms[0]) == ("3.12", "manylinux_2_39_x86_64")
    assert checks.check_resolution(resolution, checks.image_pins(requirements_text), base) == []
    installed = resolution.installed()
    assert installed["torch"] == "2.13.0"
    assert checks.torch_cuda_version(installed) == (13, 0)
    assert any(name.startswith("nvidia-nccl") for name in installed)
    assert resolution.seconds < 150


def _copy(tmp_path, requirements_text, old, new, with_pins):
    """The image's requirements with `old` changed to `new`, keeping only that pin and the pins of `with_pins` (what
    it must agree with): the resolver stops on the same problem without resolving the whole image again."""
    assert old in requirements_text
    kept = {old.split("==")[0], *with_pins}
    lines = [line if line != old else new for line in requirements_text.splitlines()
             if line.startswith("-") or line.split("==")[0] in kept]
    path = tmp_path / "requirements.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("old", "new", "with_pins", "message"),
    [
        # a pinned version that the index does not have (never released, or removed)
        ("safetensors==0.8.0", "safetensors==0.0.1", (), "No matching distribution found for safetensors==0.0.1"),
        # a version with no wheel for the image's Python (3.12) on Linux: pandas 2.0.3 stops at CPython 3.11
        ("pandas==3.1.1", "pandas==2.0.3", (), "No matching distribution found for pandas==2.0.3"),
        # pins that contradict each other: transformers 5.23.0 requires tokenizers >=0.23.1,<0.24
        ("tokenizers==0.23.3", "tokenizers==0.22.2", ("transformers",), "conflicting dependencies"),
    ],
)
def test_requirements_that_stop_resolving_are_reported(checks, target, requirements_text, tmp_path, old, new,
                                                       with_pins, message):
    base, python, platforms = target
    path = _copy(tmp_path, requirements_text, old, new, with_pins)
    result = checks.resolve(path, python, platforms)
    problems = checks.check_resolution(result, checks.image_pins(path.read_text(encoding="utf-8")), base)
    assert len(problems) == 1 and "do not resolve" in problems[0] and message in problems[0], problems


def test_a_resolve_that_runs_out_of_time_says_so(checks, target):
    _, python, platforms = target
    result = checks.resolve(REQUIREMENTS, python, platforms, timeout=0.05)
    assert len(result.problems) == 1 and "did not finish" in result.problems[0]
    assert "PyPI" in result.problems[0]


def _resolution(checks, packages):
    report = {"install": [{"metadata": {"name": n, "version": v}} for n, v in packages.items()]}
    return checks.Resolution([], report, 1.0)


def test_a_torch_cuda_other_than_the_base_or_a_cpu_torch_is_reported(checks, dockerfile_text):
    base = checks.base_image_pin(dockerfile_text)
    pins = {"torch": checks.Pin("torch", (), "2.13.0")}
    good = _resolution(checks, {"torch": "2.13.0", "cuda-toolkit": "13.0.3.0"})
    assert checks.check_resolution(good, pins, base) == []
    cuda12 = _resolution(checks, {"torch": "2.13.0", "nvidia-cuda-runtime-cu12": "12.8.90"})
    assert checks.check_resolution(cuda12, pins, base) == [
        "torch's CUDA runtime is 12.8 but the base image is CUDA 13.0"]
    cpu = _resolution(checks, {"torch": "2.13.0"})
    assert "CPU build" in checks.check_resolution(cpu, pins, base)[0]
    other = _resolution(checks, {"torch": "2.12.0", "cuda-toolkit": "13.0.3.0"})
    assert checks.check_resolution(other, pins, base) == ["torch resolved to 2.12.0, pinned 2.13.0"]
