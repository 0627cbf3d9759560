"""The validation gate: build every candidate of a matrix, smoke-test it inside a
throwaway container, publish only what passes, and only if the run's failure
rate stays within the threshold (default 0.3 %, as AutoDL's nightly pipeline).

A matrix is JSON (the CLI also reads TOML):
    {"threshold": 0.003,
     "candidates": [{"name": "...", "dockerfile": "FROM ...", "expect": {...}}],
     "templates": [{"name": "py{python}", "dockerfile": "FROM {base}\\n...",
                    "axes": {"python": ["3.11"]}, "expect": {"python": "{python}"}}]}
`expect` may hold python, framework, framework_version and imports. Without a
matrix the default one is built from the local base image (no registry needed).
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpudock.db.models import UserModel
from gpudock.errors import Forbidden, GpudockError, InvalidRequest
from gpudock.images.catalog import ImageSpec, with_size
from gpudock.services.context import ServiceContext
from gpudock.services.images import builds as image_builds
from gpudock.services.images import catalog as images

DEFAULT_THRESHOLD = 0.003
SMOKE_PATH = "/tmp/gpudock-smoke.py"  # noqa: S108 - inside a throwaway container
SMOKE_TIMEOUT_S = 120.0
SMOKE = r"""
import importlib, json, platform, subprocess, sys
expect = json.loads(sys.argv[1])
results = []
def check(name, ok, detail=""):
    results.append({"check": name, "ok": bool(ok), "detail": str(detail)[:300]})
for module in expect.get("imports", []):
    try:
        importlib.import_module(module); check("import " + module, True)
    except Exception as exc:
        check("import " + module, False, repr(exc))
if expect.get("python"):
    found = platform.python_version()
    check("python " + expect["python"], (found + ".").startswith(expect["python"] + "."), found)
if expect.get("framework") == "pytorch":
    try:
        import torch
        want = expect.get("framework_version") or ""
        check("torch " + want, torch.__version__.startswith(want), torch.__version__)
        x = torch.ones(4, 4)
        check("tiny computation", float((x @ x).sum()) == 64.0)
    except Exception as exc:
        check("torch", False, repr(exc))
else:
    check("tiny computation", sum(i * i for i in range(10)) == 285)
done = subprocess.run(["gpudock-doctor", "--json"], capture_output=True, text=True)
try:
    report = json.loads(done.stdout)
    errors = [f["message"] for f in report["findings"] if f["severity"] == "error"]
    check("doctor", done.returncode == 0, "; ".join(errors))
except Exception as exc:
    check("doctor", False, (done.stdout + done.stderr)[-300:] or repr(exc))
print(json.dumps(results))
"""


@dataclass(frozen=True)
class Candidate:
    name: str
    dockerfile: str
    expect: dict[str, Any]


@dataclass
class Outcome:
    name: str
    reference: str
    status: str = "failed"  # passed | failed | published | held back
    build_error: str | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)
    image_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.build_error is None and bool(self.checks) and all(c["ok"] for c in self.checks)


def default_matrix(base_image: str) -> dict[str, Any]:
    return {
        "threshold": DEFAULT_THRESHOLD,
        "templates": [
            {
                "name": "base-python{python}",
                "dockerfile": "FROM {base}\nLABEL org.gpudock.python={python}\n",
                "axes": {"python": ["3.11"], "base": [base_image]},
                "expect": {"python": "{python}", "imports": ["json", "sqlite3", "ssl"]},
            }
        ],
    }


def expand(matrix: dict[str, Any]) -> list[Candidate]:
    """Explicit candidates plus every combination of each template's axes."""
    found = [
        Candidate(str(c["name"]), str(c["dockerfile"]), dict(c.get("expect", {})))
        for c in matrix.get("candidates", [])
    ]
    for template in matrix.get("templates", []):
        axes: dict[str, list[str]] = template.get("axes", {})
        for values in itertools.product(*axes.values()):
            bound = dict(zip(axes, values, strict=True))
            try:
                found.append(
                    Candidate(
                        str(template["name"]).format(**bound),
                        str(template["dockerfile"]).format(**bound),
                        _bind(template.get("expect", {}), bound),
                    )
                )
            except (KeyError, IndexError) as exc:
                raise InvalidRequest(f"a template names no axis {exc}", field="matrix") from exc
    if not found:
        raise InvalidRequest("the matrix has no candidates", field="matrix")
    if len({c.name for c in found}) != len(found):
        raise InvalidRequest("candidate names must be unique", field="matrix")
    return found


def _bind(value: Any, bound: dict[str, str]) -> Any:
    """Fill {axis} placeholders in every string of a JSON-like value."""
    if isinstance(value, str):
        return value.format(**bound)
    if isinstance(value, list):
        return [_bind(v, bound) for v in value]
    if isinstance(value, dict):
        return {k: _bind(v, bound) for k, v in value.items()}
    return value


def validate(
    ctx: ServiceContext, user: UserModel, matrix: dict[str, Any] | None
) -> Iterator[dict[str, Any]]:
    """Yield {'log': ...} events and finally {'report': {...}}. Admin only:
    what passes is published to everyone."""
    if not user.is_admin:
        raise Forbidden("validation publishes public images: it needs an admin token")
    matrix = matrix or default_matrix(ctx.settings.default_image)
    threshold = float(matrix.get("threshold", DEFAULT_THRESHOLD))
    if not 0 <= threshold <= 1:
        raise InvalidRequest("threshold must be between 0 and 1", field="threshold")
    candidates = expand(matrix)
    for candidate in candidates:
        images.private_reference(user, candidate.name)  # names must be valid up front
    return _run(ctx, user, candidates, threshold)


def _run(
    ctx: ServiceContext, user: UserModel, candidates: list[Candidate], threshold: float
) -> Iterator[dict[str, Any]]:
    run_id = secrets.token_hex(3)
    outcomes = []
    parents: dict[str, ImageSpec | None] = {}
    for number, candidate in enumerate(candidates, 1):
        yield {"log": f"[{number}/{len(candidates)}] {candidate.name}: building"}
        outcome = Outcome(candidate.name, f"gpudock-sys/validated/{candidate.name}:{run_id}")
        parents[candidate.name] = yield from _build(ctx, user, candidate, outcome)
        if outcome.build_error is None:
            outcome.checks = _smoke(ctx, outcome.reference, candidate.expect)
        outcome.status = "passed" if outcome.ok else "failed"
        yield {"log": f"[{number}/{len(candidates)}] {candidate.name}: {outcome.status}"}
        outcomes.append(outcome)
    failures = sum(1 for o in outcomes if not o.ok)
    rate = failures / len(outcomes)
    gate_open = rate <= threshold
    for outcome, candidate in zip(outcomes, candidates, strict=True):
        _settle(ctx, user, outcome, candidate, parents.get(candidate.name), gate_open)
    yield {
        "report": {
            "run_id": run_id,
            "threshold": threshold,
            "failure_rate": rate,
            "passed": gate_open,
            "published": [o.reference for o in outcomes if o.status == "published"],
            "candidates": [o.__dict__ | {"ok": o.ok} for o in outcomes],
        }
    }


def _build(
    ctx: ServiceContext, user: UserModel, candidate: Candidate, outcome: Outcome
) -> Generator[dict[str, Any], None, ImageSpec | None]:
    """Build the candidate; returns the catalog entry it starts from."""
    try:
        plan, parent = image_builds.plan_build(ctx, user, candidate.dockerfile)
    except GpudockError as exc:
        outcome.build_error = exc.message
        return None
    labels = {"gpudock.validation": candidate.name}
    context = image_builds.empty_context()
    for event in image_builds.run(ctx, user, plan, context, outcome.reference, labels):
        if "error" in event:
            outcome.build_error = str(event["error"])
            yield {"log": f"    {event['error']}"}
        elif "log" in event:
            yield {"log": f"    {event['log']}"}
        elif "image_id" in event:
            outcome.image_id = str(event["image_id"])
    return parent


def _smoke(ctx: ServiceContext, reference: str, expect: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        result = ctx.runtime.run_once(
            reference,
            ["python3", SMOKE_PATH, json.dumps(expect)],
            {SMOKE_PATH: SMOKE.encode()},
            SMOKE_TIMEOUT_S,
            cluster_id=ctx.cluster_id,
        )
    except GpudockError as exc:
        return [{"check": "run", "ok": False, "detail": exc.message}]
    lines = result.output.decode(errors="replace").strip().splitlines()
    try:
        checks: list[dict[str, Any]] = json.loads(lines[-1])
    except (IndexError, ValueError):
        detail = result.output.decode(errors="replace")[-300:]
        return [{"check": "smoke suite", "ok": False, "detail": detail or "no output"}]
    if result.exit_code != 0:
        checks.append({"check": "exit code", "ok": False, "detail": str(result.exit_code)})
    return checks


def _settle(
    ctx: ServiceContext,
    user: UserModel,
    outcome: Outcome,
    candidate: Candidate,
    parent: ImageSpec | None,
    gate_open: bool,
) -> None:
    """Publish a passing candidate when the gate is open; hold back the rest."""
    if not (outcome.ok and gate_open):
        outcome.status = "held back"
        ctx.runtime.remove_image(outcome.reference)
        return
    expect = candidate.expect
    spec = ImageSpec(
        reference=outcome.reference,
        name=candidate.name,
        description="validated by `gpudock images validate`",
        python=expect.get("python"),
        framework=expect.get("framework"),
        framework_version=expect.get("framework_version"),
        origin="validated",
    )
    if parent is not None:
        spec = images.derived(parent, spec.reference, spec.name, "validated")
    size = ctx.runtime.image_size(spec.reference) or 0
    images.register(ctx, user, with_size(spec, size), public=True, engine_image_id=outcome.image_id)
    outcome.status = "published"
