"""The shape rule on a release newer than the newest tested one (patches/shapes.py).

Built from the newest tested release's own sources (vLLM 0.33.0, unpacked as
for its contract tests): a copy whose only change is its version, 0.34.0, and
a copy whose ``Worker.profile`` also gains a required parameter, as a changed
release would ship it. Each runs in its own interpreter through the real
start-up path: the plugin's ``register()`` (as vLLM calls it in every
process), then the engine modules the patches hook.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rlprof_plugins.cli.compatibility import TESTED
from rlprof_plugins.patches import VLLM_PATCHES
from tests.compat.releases import CACHE, ROOT, contract_environment, ensure
from tests.helpers.installed import TEST_PATH
from tests.compat.test_releases import PYTHON

NEWEST = TESTED["vllm"][-1]
NEXT = "0.34.0"
WORKER_FILE = Path("vllm/v1/worker/gpu_worker.py")
PROFILE_HEAD = "    def profile(\n        self,\n        is_start: bool = True,\n"
CHANGED_HEAD = "    def profile(\n        self,\n        mode,\n        is_start: bool = True,\n"

# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, the shape rule runs on declarations and records in
# tests/unit/test_shapes.py and on the real releases in tests/compat/test_releases.py
pytestmark = [pytest.mark.extended,
              pytest.mark.skipif(not PYTHON["vllm"].exists(), reason="no vLLM test environment; `make env` builds it")]

# Runs in the child: the plugin as the engine loads it, then every patched module.
STARTUP = """
import importlib, json, logging, sys
from tests.compat.release_env import adapt
adapt("vllm")
said = []
class Keep(logging.Handler):  # the warnings (INFO says which install loaded)
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            said.append(record.getMessage())
logging.getLogger("rlprof").addHandler(Keep())
from rlprof_plugins.entry_points.vllm import register
register()
from rlprof_plugins.patches import VLLM_PATCHES
for patch in VLLM_PATCHES:
    try:
        importlib.import_module(patch.module)
    except ImportError:
        pass  # a module of an older era
import vllm.version
print(json.dumps({"version": vllm.version.__version__, "warnings": said,
                  "applied": [p.name for p in VLLM_PATCHES if p.applied]}))
"""


def _copy(name: str, worker_edit: tuple[str, str] | None) -> Path:
    """The newest tested release relabelled as NEXT (hard links: cheap), one file edited if asked."""
    source = ensure("vllm", NEWEST)
    assert source is not None, "the newest tested release must be an unpacked wheel"
    target = CACHE / "engines" / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, copy_function=os.link)
    _rewrite(target / "vllm" / "_version.py", lambda text: text.replace(
        f"'{NEWEST}'", f"'{NEXT}'").replace(str(tuple(int(x) for x in NEWEST.split("."))), "(0, 34, 0)"))
    if worker_edit is not None:
        old, new = worker_edit
        _rewrite(target / WORKER_FILE, lambda text: _replace_once(text, old, new))
    return target


def _rewrite(path: Path, change) -> None:
    text = path.read_text()
    path.unlink()  # a hard link: write a new file, never the shared one
    path.write_text(change(text))


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} is not in {WORKER_FILE} exactly once"
    return text.replace(old, new)


def _run(path: Path, code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("RLPROF_DISABLE", "RLPROF_STRICT_VERSIONS")}
    environment.update(PYTHONPATH=os.pathsep.join((str(TEST_PATH), str(path))), HF_HUB_OFFLINE="1",
                       VLLM_NO_USAGE_STATS="1", PYTHONWARNINGS="ignore", **contract_environment("vllm", NEXT), **env)
    out = subprocess.run([str(PYTHON["vllm"]), "-c", code, *args], cwd=ROOT, env=environment, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out


def _startup(path: Path, **env: str) -> dict:
    return json.loads(_run(path, STARTUP, **env).stdout.strip().splitlines()[-1])


def _doctor(path: Path) -> dict:
    code = ("import sys; from tests.compat.release_env import adapt; adapt('vllm'); "
            "from rlprof_plugins.cli import main; sys.exit(main(['doctor', '--engine', 'vllm', '--json']))")
    return json.loads(_run(path, code).stdout)["engines"][0]


def _together(*calls):
    """Independent interpreters side by side (each is one core's worth of imports)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    return [f.result() for f in futures]


def _for_newest() -> list[str]:
    return [p.name for p in VLLM_PATCHES if p.supports(NEWEST)]


def test_a_newer_release_with_the_same_shapes_gets_every_patch():
    path = _copy(f"vllm-{NEXT}-as-{NEWEST}", None)
    started, report, strict = _together(lambda: _startup(path), lambda: _doctor(path),
                                         lambda: _startup(path, RLPROF_STRICT_VERSIONS="1"))
    assert started["version"] == NEXT
    assert started["applied"] == _for_newest()
    untested = [w for w in started["warnings"] if "newer than the newest tested release" in w]
    assert len(untested) == 1 and NEXT in untested[0] and NEWEST in untested[0], started["warnings"]
    assert [w for w in started["warnings"] if w not in untested] == []  # no patch was refused

    assert report["supported"] and not report["tested"] and report["untested_newer"] == NEWEST and report["ok"]
    states = {p["name"]: (p["state"], p["detail"]) for p in report["patches"]}
    for name in _for_newest():
        assert states[name][0] == "applies" and "untested release, shape checked" in states[name][1], states[name]
    assert {n for n, (state, _) in states.items() if state == "off"} == {
        p.name for p in VLLM_PATCHES if not p.supports(NEWEST)}  # the env-era (< 0.13) patches
    assert all(f["available"] for f in report["features"] if "RLPROF_PROFILER_CONFIG" not in f["feature"])

    assert strict["applied"] == []
    assert all("RLPROF_STRICT_VERSIONS" in w for w in strict["warnings"] if "outside the range" in w)


def test_a_changed_target_turns_off_only_its_patch_with_one_warning():
    path = _copy(f"vllm-{NEXT}-profile-changed", (PROFILE_HEAD, CHANGED_HEAD))
    started, report = _together(lambda: _startup(path), lambda: _doctor(path))
    worker = "vllm.worker.profile"
    assert started["applied"] == [n for n in _for_newest() if n != worker]
    refused = [w for w in started["warnings"] if worker in w]
    assert len(refused) == 1, started["warnings"]
    assert NEXT in refused[0] and NEWEST in refused[0] and "Worker.profile" in refused[0]
    assert "(self, mode, is_start=" in refused[0]  # what changed, as it now is
    states = {p["name"]: (p["state"], p["detail"]) for p in report["patches"]}
    assert states[worker][0] == "off" and "Worker.profile" in states[worker][1]
    assert all(states[n][0] == "applies" for n in _for_newest() if n != worker)
    windows = [f for f in report["features"] if f["feature"] == "rlprof step windows and global-step folders"]
    assert windows and not windows[0]["available"]
