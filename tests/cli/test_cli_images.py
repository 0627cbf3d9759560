"""`gpudock images|instances save-image|doctor|env` through the CLI against a live server."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import Invoke


def test_images_list_marks_where_each_runs(gpudock: Invoke) -> None:
    result = gpudock("images", "list", "--gpu", "A100-80GB")
    assert result.exit_code == 0, result.output
    assert "gpudock/base:bookworm" in result.output
    assert "needs NVIDIA driver >= 570.26" in result.output  # the cu128 images
    listed = json.loads(gpudock("images", "list", "--json").output)
    assert {"A100-80GB", "RTX4090-24GB"} == set(listed[0]["runs_on"])


def test_images_build_streams_the_log_and_registers(gpudock: Invoke, tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM gpudock/base:bookworm\nRUN echo hello\n")
    result = gpudock("images", "build", "-t", "cli-built:v1", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "Step 2/3 : RUN echo hello" in result.output
    assert "built gpudock/admin/cli-built:v1 (private" in result.output
    elsewhere = tmp_path / "other.Dockerfile"
    elsewhere.write_text("FROM gpudock/base:bookworm\nRUN false\n")
    failed = gpudock("images", "build", "-t", "bad", "-f", str(elsewhere), str(tmp_path))
    assert failed.exit_code == 1
    assert "returned a non-zero code: 1" in failed.output


def test_images_validate_reports_and_fails_over_the_threshold(
    gpudock: Invoke, tmp_path: Path
) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(
        'threshold = 0.003\n[[candidates]]\nname = "ok"\n'
        'dockerfile = "FROM gpudock/base:bookworm"\n'
        '[[candidates]]\nname = "broken"\ndockerfile = "FROM gpudock/base:bookworm\\nRUN false"\n'
    )
    result = gpudock("images", "validate", "--matrix", str(matrix))
    assert result.exit_code == 1, result.output
    assert "held back" in result.output and "failure rate 50.0%" in result.output


def test_doctor_and_env_check_run_locally(gpudock: Invoke, tmp_path: Path) -> None:
    result = gpudock("doctor", "--json", "--no-torch", url=None, token=None)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["findings"][0]["code"] == "no_gpu"
    check = gpudock("env", "check", "--min-capability", "7.0", "--min-gpu-memory", "32GB")
    assert check.exit_code == 1 and "no GPU here" in check.output
    bad = gpudock("env", "check", "--min-gpu-memory", "lots")
    assert bad.exit_code == 2
    exported = gpudock("env", "export", "-o", str(tmp_path / "bundle"), "--base", "me/img:1")
    assert exported.exit_code == 0, exported.output
    assert (tmp_path / "bundle/Dockerfile").read_text().startswith("FROM me/img:1\n")
    assert "fastapi==" in (tmp_path / "bundle/requirements.txt").read_text()
    facts = json.loads((tmp_path / "bundle/environment.json").read_text())
    assert facts["gpus"] == [] and facts["base_image"] == "me/img:1"


def test_instances_save_image(gpudock: Invoke) -> None:
    created = gpudock("instances", "create", "--gpu", "A100-80GB", "--name", "tosave", "--wait")
    assert created.exit_code == 0, created.output
    result = gpudock("instances", "save-image", "tosave", "--name", "snap")
    assert result.exit_code == 0, result.output
    assert "saved gpudock/admin/snap:latest" in result.output
    assert "data volume" in result.output
