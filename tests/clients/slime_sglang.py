"""slime's ``tools/profile_rollout.py`` sequence, as a function the tests call.

Source: THUDM/slime ``tools/profile_rollout.py`` (shared engine notes,
section 7): ``GET <router>/workers``, then for every listed worker ``POST
<worker>/start_profile`` with ``{"output_dir", "num_steps", "activities",
"profile_by_stage", "with_stack", "record_shapes"}`` (defaults
``/tmp/sglang_profile``, 3, ``["GPU"]``, false, false, false) and, run again
with ``--action stop``, ``POST <worker>/stop_profile {}``. slime prints a
failed call and goes on; the replay returns each answer's status code.
``tools/analyze_profile.py`` then globs ``*.trace.json.gz`` in that one
folder and tells ranks apart by ``TP-<n>`` in the names (``traces_as_slime_reads``).
"""

from __future__ import annotations

import re
from pathlib import Path

import requests


def workers(router_url: str) -> list[str]:
    r = requests.get(f"{router_url}/workers", timeout=10)
    r.raise_for_status()
    return [w["url"] for w in r.json().get("workers", []) if w.get("url")]


def start(router_url: str, output_dir: str, *, num_steps: int = 3, activities=("GPU",), profile_by_stage=False,
          with_stack=False, record_shapes=False) -> dict[str, requests.Response]:
    body = {"output_dir": output_dir, "num_steps": num_steps, "activities": list(activities),
            "profile_by_stage": profile_by_stage, "with_stack": with_stack, "record_shapes": record_shapes}
    return {url: requests.post(f"{url}/start_profile", json=body, timeout=600) for url in workers(router_url)}


def stop(router_url: str) -> dict[str, requests.Response]:
    return {url: requests.post(f"{url}/stop_profile", json={}, timeout=600) for url in workers(router_url)}


def traces_as_slime_reads(folder: Path) -> dict[int, list[Path]]:
    """TP rank -> trace files, as slime's analyzer finds them."""
    ranks: dict[int, list[Path]] = {}
    for path in sorted(Path(folder).glob("*.trace.json.gz")):
        found = re.search(r"TP-(\d+)", path.name)
        if found:
            ranks.setdefault(int(found.group(1)), []).append(path)
    return ranks
