"""The image's Python pins (docker/requirements.txt) equal the project's (pyproject.toml), and drift is reported."""

import pytest

from tests.docker.conftest import ROOT


def _pyproject_copy(tmp_path, old: str, new: str):
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "pyproject.toml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_image_pins_equal_project_pins(checks, requirements_text):
    assert checks.check_pins(requirements_text=requirements_text) == []
    pins = checks.image_pins(requirements_text)
    assert {"torch", "transformers", "ray", "mlflow", "pandas"} <= pins.keys()
    assert pins["ray"].extras == ("default", "train", "tune")
    assert "pytest" not in pins and "datasets" not in pins  # dev and build-data are not in the image


def test_requirements_file_is_what_write_generates(checks, requirements_text):
    assert requirements_text == checks.render_requirements(checks.project_pins()), (
        "docker/requirements.txt is out of date: run `.venv/bin/python docker/checks.py --write`")


def test_a_drifted_image_pin_is_reported(checks, requirements_text):
    drifted = requirements_text.replace("numpy==2.4.6", "numpy==2.4.5")
    problems = checks.check_pins(requirements_text=drifted)
    assert problems == ["numpy: the image pins 2.4.5, the project pins 2.4.6"]


def test_a_drifted_project_pin_is_reported(checks, requirements_text, tmp_path):
    pyproject = _pyproject_copy(tmp_path, '"transformers==5.23.0"', '"transformers==5.24.0"')
    problems = checks.check_pins(pyproject, requirements_text)
    assert problems == ["transformers: the image pins 5.23.0, the project pins 5.24.0"]


def test_a_pin_missing_from_the_image_or_extra_in_it_is_reported(checks, requirements_text):
    missing = requirements_text.replace("mlflow==3.17.2\n", "")
    assert checks.check_pins(requirements_text=missing) == [
        "mlflow==3.17.2 is pinned by the project but missing from the image"]
    extra = requirements_text + "requests==2.34.2\n"
    assert checks.check_pins(requirements_text=extra) == [
        "requests==2.34.2 is in the image but not among the project's pins"]


def test_changed_extras_are_reported(checks, requirements_text):
    changed = requirements_text.replace("ray[default,train,tune]==2.60.0", "ray[tune]==2.60.0")
    problems = checks.check_pins(requirements_text=changed)
    assert len(problems) == 1 and "extras" in problems[0] and "ray" in problems[0]


def test_torch_may_differ_by_its_build_only(checks, requirements_text):
    cuda_build = requirements_text.replace("torch==2.13.0", "torch==2.13.0+cu130")
    assert checks.check_pins(requirements_text=cuda_build) == []
    other_version = requirements_text.replace("torch==2.13.0", "torch==2.12.0+cu130")
    assert checks.check_pins(requirements_text=other_version) == [
        "torch: the image pins 2.12.0+cu130, the project pins 2.13.0"]
    labelled_numpy = requirements_text.replace("numpy==2.4.6", "numpy==2.4.6+local")
    assert checks.check_pins(requirements_text=labelled_numpy) != []


def test_an_unpinned_requirement_is_reported(checks, requirements_text, tmp_path):
    pyproject = _pyproject_copy(tmp_path, '"numpy==2.4.6"', '"numpy>=2.4"')
    problems = checks.check_pins(pyproject, requirements_text)
    assert len(problems) == 1 and "numpy>=2.4" in problems[0] and "not pinned" in problems[0]
    loose_image = requirements_text.replace("tqdm==4.70.1", "tqdm")
    problems = checks.check_pins(requirements_text=loose_image)
    assert len(problems) == 1 and "'tqdm' is not pinned" in problems[0]


def test_the_image_extras_exist(checks, tmp_path):
    pyproject = _pyproject_copy(tmp_path, "tracking = [", "tracked = [")
    with pytest.raises(checks.CheckError, match="tracking"):
        checks.project_pins(pyproject)
