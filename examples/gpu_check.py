"""rlprof's GPU proof kit: build it where PyPI is reachable, run it on a GPU machine that has only torch.

    python examples/gpu_check.py deps .cache/gpu-kit-deps                           (make env)
    python examples/gpu_check.py kit .gpu-kit --wheel DIST/rlprof_plugins-*.whl      (make gpu-kit)
    python .gpu-kit/gpu_check.py check [--device cuda] [--out DIR]                   (make gpu-check)

``kit`` writes a folder of at most 64 MiB: the rlprof wheel, the self-test
(``rlprof_selftest/``, beside this script), every runtime dependency it needs
that a machine with torch may lack (``packaging``,
``wrapt``, ``nvtx``, and the ``fast`` extra's ``msgspec`` and ``zlib-ng``) as
manylinux wheels for CPython 3.10-3.12 on x86_64 and aarch64 (``pip download
--only-binary``), and this script. ``check`` needs no network: it installs
the kit with ``pip --no-index`` into a scratch folder (nothing changes in the
Python environment), runs ``python -m rlprof_selftest`` (a small model served through
rlprof's session path: CUDA graphs captured and replayed inside the window,
chunked recording, stage traces, the memory snapshot, ``rlprof check``, the
summary and the report, and the proof checks of ``rlprof_selftest/proof.py``)
and writes ``gpu-check-result.json`` with the machine's facts, every check
and its numbers, plus the row the kit's results table takes (benchmarks/results/gpu-kit.md). Exit 0 when every
check that applies passed. Only the standard library: it runs before rlprof
is installed.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

KIT_LIMIT = 64 * 1024 * 1024
PYTHONS = ("3.10", "3.11", "3.12")
PLATFORMS = {"x86_64": ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux1_x86_64"),
             "aarch64": ("manylinux_2_17_aarch64", "manylinux2014_aarch64", "manylinux_2_28_aarch64")}
# install_requires and the fast extra (setup.cfg): what a machine with torch alone may lack
REQUIREMENTS = ("packaging", "wrapt>=1.14", "nvtx>=0.2.10", "msgspec>=0.18", "zlib-ng>=0.5")
RESULT = "gpu-check-result.json"
SELFTEST = "rlprof_selftest"  # the self-test's package, beside this script in the tree and in the kit


# ---- kit (where PyPI is reachable) ----------------------------------------------------
def download_dependencies(folder: Path) -> None:
    """Every dependency's wheel for each CPython and platform the kit serves (pip's cache keeps a rerun fast)."""
    folder.mkdir(parents=True, exist_ok=True)
    for python in PYTHONS:
        for arch, tags in PLATFORMS.items():
            platforms = [arg for tag in tags for arg in ("--platform", tag)]
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", *platforms,
                            "--python-version", python, "--implementation", "cp", "-d", str(folder),
                            *REQUIREMENTS], check=True)
    (folder / ".downloaded").write_text(json.dumps({"pythons": PYTHONS, "platforms": list(PLATFORMS)}))


def build_kit(out: Path, wheel: Path, deps: Path) -> int:
    """``out``: the wheel, the dependencies (``deps``, downloaded there when missing), this script."""
    if not (deps / ".downloaded").exists():
        download_dependencies(deps)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "wheels").mkdir(parents=True)
    for path in [wheel, *sorted(deps.glob("*.whl"))]:
        shutil.copy2(path, staging / "wheels" / path.name)
    shutil.copy2(__file__, staging / "gpu_check.py")
    shutil.copytree(Path(__file__).resolve().parent / SELFTEST, staging / SELFTEST,
                    ignore=shutil.ignore_patterns("__pycache__"))
    size = sum(p.stat().st_size for p in staging.rglob("*") if p.is_file())
    if size > KIT_LIMIT:
        raise SystemExit(f"gpu kit: {size / 2**20:.1f} MiB, over the {KIT_LIMIT / 2**20:.0f} MiB a GPU machine takes")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    print(f"{out}: {size / 2**20:.1f} MiB, {len(list((out / 'wheels').glob('*.whl')))} wheels; on the GPU machine: "
          f"python {out.name}/gpu_check.py check --device cuda")
    return 0


# ---- check (on the GPU machine, no network) ---------------------------------------------
def install(kit: Path, target: Path) -> None:
    """The kit's rlprof and its dependencies into ``target`` only: no index, no change to the environment."""
    wheel = next(iter(sorted((kit / "wheels").glob("rlprof_plugins-*.whl"))), None)
    if wheel is None:
        raise SystemExit(f"{kit}/wheels holds no rlprof_plugins wheel: build the kit with `make gpu-kit`")
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(kit / "wheels"),
                    "--no-warn-conflicts", "--target", str(target), f"{wheel}[fast]"], check=True)


def machine() -> dict:
    """Date, host, Python, torch, CUDA and the GPU with its driver, as this machine says."""
    import torch

    facts = {"date": datetime.date.today().isoformat(), "host": platform.node(), "python": platform.python_version(),
             "machine": platform.machine(), "torch": torch.__version__, "cuda": torch.version.cuda,
             "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "driver": None}
    smi = shutil.which("nvidia-smi")
    if smi and facts["gpu"]:
        done = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30)
        facts["driver"] = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    return facts


def run_check(kit: Path, device: str, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    site = out / "site"
    install(kit, site)
    path = [str(site), str(kit), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path).rstrip(os.pathsep)}
    done = subprocess.run([sys.executable, "-m", SELFTEST, "--device", device, "--out", str(out / "selftest"),
                           "--json"], env=env, capture_output=True, text=True)
    sys.stderr.write(done.stderr[-4000:])
    try:
        selftest = json.loads(done.stdout)
    except ValueError:
        selftest = {"ok": False, "parts": [], "costs": {}, "error": done.stdout[-2000:] or done.stderr[-2000:]}
    version = glob.glob(str(site / "rlprof_plugins-*.dist-info"))
    result = {"machine": machine(), "rlprof_plugins": Path(version[0]).name.split("-")[1] if version else None,
              "ok": bool(selftest.get("ok")) and done.returncode == 0, "selftest": selftest}
    result["results_row"] = results_row(result)
    (out / RESULT).write_text(json.dumps(result, indent=1) + "\n")
    for part in selftest.get("parts", []):
        print(f"  {part['state']:<8} {part['name']}: {part['detail']}")
    print(f"\n{out / RESULT}: {'every check that applies passed' if result['ok'] else 'FAILED'}")
    print("benchmarks/results/gpu-kit.md row:\n" + result["results_row"])
    return 0 if result["ok"] else 1


def results_row(result: dict) -> str:
    """One row of the kit's results table (benchmarks/results/gpu-kit.md): the machine, each check's state, and the costs that matter most."""
    m, selftest = result["machine"], result["selftest"]
    states = "; ".join(f"{p['name']}: {p['state']}" for p in selftest.get("parts", []))
    costs = "; ".join(f"{k}: {v}" for k, v in selftest.get("costs", {}).items()
                      if k in ("iteration, recording", "a rollout, recorded", "pauses on the engine thread", "trace size",
                               "device events", "memory snapshot", "device time (report)"))
    return (f"| {m['date']} | {m['gpu'] or 'CPU'} | {m['driver'] or '-'} | torch {m['torch']} (CUDA {m['cuda'] or '-'}), "
            f"Python {m['python']} | {'passed' if result['ok'] else 'FAILED'} | {states} | {costs} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("deps", help="download the dependencies' wheels (needs PyPI)")
    d.add_argument("folder", type=Path)
    k = sub.add_parser("kit", help="build the kit folder (needs PyPI unless the dependencies are downloaded)")
    k.add_argument("out", type=Path)
    k.add_argument("--wheel", type=Path, required=True, help="the rlprof_plugins wheel to ship")
    k.add_argument("--deps", type=Path, help="where the dependency wheels are downloaded (default OUT.deps)")
    c = sub.add_parser("check", help="install the kit with no index and prove rlprof on this machine")
    c.add_argument("--device", choices=("auto", "cuda", "cpu", "npu"), default="auto")
    c.add_argument("--out", type=Path, default=Path("gpu-check"), help="results folder (default ./gpu-check)")
    c.add_argument("--kit", type=Path, default=Path(__file__).resolve().parent, help="default: this script's folder")
    args = p.parse_args(argv)
    if args.command == "deps":
        download_dependencies(args.folder)
        return 0
    if args.command == "kit":
        return build_kit(args.out, args.wheel, args.deps or args.out.with_name(args.out.name + ".deps"))
    return run_check(args.kit, args.device, args.out)


if __name__ == "__main__":
    sys.exit(main())
