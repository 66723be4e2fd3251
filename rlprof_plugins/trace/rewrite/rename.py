"""What one rank's events become in a merged trace (the rules in ``merge``).

Each rank is renamed on its own: its merged pids come from its own range
(``PID_STRIDE``), its ids are shifted by its order and its clock by its
base time, all known before it is read, so ranks can be renamed in
parallel processes and their outputs concatenated.
"""

from __future__ import annotations

from typing import Any

from ..format.naming import DEVICE_CATS, DEVICE_WORDS
from ..format.clock import ts_ns
from ..format.rank_files import RankFile

ID_STRIDE = 10**12
PID_STRIDE = 100_000  # each rank's merged pids: order * PID_STRIDE + 1, + 2, ...
FLOW_PHASES = frozenset("stf")
ASYNC_PHASES = frozenset("bne")
ID_PHASES = FLOW_PHASES | ASYNC_PHASES
ID_ARGS = ("correlation", "External id")
REPLACED_METADATA = frozenset({"process_name", "process_sort_index"})


class RankRenamer:
    """Per-input renaming state."""

    def __init__(self, rf: RankFile, order: int, shift_us: float, first_pid: int,
                 absolute_base_ns: int | None = None) -> None:
        self.rf = rf
        # torch_npu timelines: absolute times, rewritten relative to the merged base
        self.absolute_base_ns = absolute_base_ns
        self.order = order
        self.id_offset = order * ID_STRIDE
        self.shift_us = shift_us
        self.next_pid = first_pid
        self.pids: dict[Any, int] = {}
        self.names: dict[int, str] = {}
        self.device: set[int] = set()

    def pid(self, source: Any) -> int:
        new = self.pids.get(source)
        if new is None:
            new = self.pids[source] = self.next_pid
            self.next_pid += 1
        return new


def _process_label(rank: RankRenamer, source_pid: Any, new_pid: int) -> str:
    original = rank.names.get(new_pid)
    is_device = new_pid in rank.device or any(w in (original or "") for w in DEVICE_WORDS)
    if isinstance(source_pid, str) and not original:
        kind, what = "trace", source_pid or "markers"
    elif is_device:
        kind, what = "device", original or f"device {source_pid}"
    else:
        kind, what = "CPU", f"{original or 'process'} (pid {source_pid})"
    place = rank.rf.place
    head = rank.rf.label + (f" [{place}]" if place else "")
    return f"{head} {kind}: {what}"


def rename_batch(events: list[dict], rank: "RankRenamer") -> list[dict]:
    """The batch's events as the merged trace holds them (the rules above);
    the process metadata they replace are dropped (``_metadata_events``)."""
    out: list[dict] = []
    keep = out.append
    pids, device = rank.pids, rank.device
    absolute = rank.absolute_base_ns
    for event in events:
        ph = event.get("ph")
        if ph == "M" and event.get("name") in REPLACED_METADATA:
            if event.get("name") == "process_name":
                name = (event.get("args") or {}).get("name")
                rank.names[rank.pid(event.get("pid"))] = str(name) if name is not None else ""
            continue
        if "pid" in event:
            source = event["pid"]
            new_pid = pids.get(source)
            if new_pid is None:
                new_pid = rank.pid(source)
            event["pid"] = new_pid
            if event.get("cat") in DEVICE_CATS:
                device.add(new_pid)
        if absolute is not None and "ts" in event:
            ns = ts_ns(event["ts"])
            if ns is not None:
                event["ts"] = (ns - absolute) / 1000.0
        if ph == "i" and event.get("s", "t") == "g":
            event["name"] = f"{rank.rf.label}: {event.get('name', '')}"
        keep(event)
    # torch_npu's absolute times were rewritten above; the rank's ids move by its order (none for the first)
    shift_and_renumber(out, 0.0 if absolute is not None else rank.shift_us, rank.id_offset, ID_ARGS, rank.rf.label)
    return out


def shift_and_renumber(events: list[dict], shift_us: float, offset: int, id_args: tuple[str, ...] = ID_ARGS,
                       label: str | None = None) -> None:
    """In place: every numeric ``ts`` moved by ``shift_us``; every flow and async id and
    every id in ``args`` (``id_args``) moved by ``offset``, string ids prefixed with
    ``label`` where one is given. The one rule merge (ranks) and stitch (chunks) share,
    so ids of two inputs never meet and their clocks line up."""
    if not shift_us and not offset:
        return
    for event in events:
        if shift_us:
            ts = event.get("ts")
            if ts.__class__ is float or ts.__class__ is int:
                event["ts"] = ts + shift_us
        if offset:
            ph = event.get("ph")
            if ph.__class__ is str and ph in ID_PHASES:
                for key in ("id", "bind_id", "id2"):
                    if key in event:
                        event[key] = _moved(event[key], offset, label)
            args = event.get("args")
            if args.__class__ is dict:
                for key in id_args:
                    value = args.get(key)
                    if value is not None:  # integer ids (nearly all) without a call
                        args[key] = value + offset if value.__class__ is int else _moved(value, offset, label)


def _moved(value: Any, offset: int, label: str | None) -> Any:
    if value.__class__ is int:
        return value + offset
    if isinstance(value, str) and label is not None:
        return f"{label}:{value}"
    return value  # booleans and anything else stay


def metadata_events(rank: RankRenamer, sort_base: int) -> list[dict]:
    out = []
    for source_pid, new_pid in rank.pids.items():
        local = new_pid - sort_base
        out.append({"ph": "M", "name": "process_name", "pid": new_pid, "tid": 0,
                    "args": {"name": _process_label(rank, source_pid, new_pid)}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": new_pid, "tid": 0,
                    "args": {"sort_index": rank.order * 100_000 + local}})
    return out
