"""``rlprof upload``: finish by hand what an engine's uploader left in a spool folder (``store.upload``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .._command import Command
from .common import EXIT_FAILED, EXIT_OK, CliError


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spool", help="the spool folder a failed upload names (its status's upload.finish), or a step "
                                 "folder inside it")
    p.add_argument("--attempts", type=int, default=3, metavar="N", help="passes before giving up (default: 3)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def cmd_upload(args) -> int:
    from ..store import destination, object_store, upload

    found = destination.destination_at(Path(args.spool).resolve())
    if found is None:
        raise CliError(f"{args.spool}: not in a spool folder of an object store output (no "
                       f"{destination.MARKER} here or above)")
    if upload.running(found.spool):
        raise CliError(f"{found.spool}: an uploader is running for it now (its process holds {upload.LOCK}); "
                       "its status says how far it got")
    try:
        result = upload.finish(found.spool, attempts=max(1, args.attempts))
    except object_store.MissingLibrary as e:
        raise CliError(str(e)) from None
    done = result.ok and not result.pending
    if args.json:
        print(json.dumps({"destination": found.uri, "spool": str(found.spool), "state": "done" if done else "failed",
                          "uploaded": result.uploaded, "failed": result.failed, "pending": result.pending}))
    else:
        print(f"{found.spool} -> {found.uri}: {len(result.uploaded)} file(s) uploaded"
              + ("" if done else f"; {result.pending} still waiting: "
                 + "; ".join(f"{k}: {v}" for k, v in list(result.failed.items())[:3])))
    return EXIT_OK if done else EXIT_FAILED


UPLOAD = Command("upload", "send what waits in an object store output's local spool (what a failed or "
                           "interrupted upload left) to its URI", _arguments, cmd_upload)
