"""The contract of rlprof's verl patches with verl's released source, in one engine's environment.

Run by test_verl_contract.py with ``RLPROF_VERL_CONTRACT=vllm|sglang`` in
that engine's interpreter, verl 0.9.1 on the path (``site``). Checks what
the patch relies on in verl's own modules: the entry point applies it when
verl is imported, the wrapped method keeps verl's signature and stays a
coroutine function (Ray reads both), verl's method body still calls the
engine's start the way the patch expects, ``set_global_steps`` sets the
attribute the patch reads, the shapes match ``patches/shape_records/verl/``,
and the patch reverts and stays off outside its range.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
import os

import pytest

from rlprof_plugins.step_sources import trainer as trainer_step
from rlprof_plugins.patches import shapes
from rlprof_plugins.patches.base import apply_guarded
from rlprof_plugins.patches.verl import facts as trainer
from rlprof_plugins.patches.verl.servers import SGLANG_SERVER_PATCH, VLLM_SERVER_PATCH

ENGINE = os.environ["RLPROF_VERL_CONTRACT"]
PATCH = {"vllm": VLLM_SERVER_PATCH, "sglang": SGLANG_SERVER_PATCH}[ENGINE]
CLASS = {"vllm": "vLLMHttpServer", "sglang": "SGLangHttpServer"}[ENGINE]
# How verl's start_profile reaches the engine (what makes the engine patch see the step).
ENGINE_CALL = {"vllm": "await self.engine.start_profile(**kwargs)",
               "sglang": "await tokenizer_manager.start_profile(**profile_args)"}[ENGINE]


@pytest.fixture(scope="module")
def module():
    importlib.import_module("verl")  # loads the verl.plugins entry points, rlprof's among them

    return importlib.import_module(PATCH.module)


def test_the_installed_release_is_the_tested_one():
    assert trainer.version() in trainer.TESTED


def test_entry_point_applies_the_patch_on_import(module):
    assert PATCH.applied
    method = getattr(module, CLASS).start_profile
    assert inspect.iscoroutinefunction(method)  # a plain async def: what Ray reads for an actor method
    assert str(inspect.signature(method)) == "(self, **kwargs)"
    assert method.__wrapped__.__qualname__ == f"{CLASS}.start_profile"  # verl's own, one layer down


def test_verl_method_bodies_are_what_the_patch_relies_on(module):
    cls = getattr(module, CLASS)
    assert ENGINE_CALL in inspect.getsource(cls.start_profile.__wrapped__)
    server = object.__new__(cls)
    asyncio.run(server.set_global_steps(4))  # verl's weight-sync hook, on a bare instance
    assert getattr(server, trainer.WEIGHTS_VERSION_ATTR) == 4


def test_the_wrapper_sets_the_step_around_verl_start(module):
    """verl's own start_profile, run on a bare instance whose profiler is on and whose
    engine records what it sees of the trainer step."""
    cls = getattr(module, CLASS)
    seen = []

    class Engine:
        async def start_profile(self, *args, **kwargs):
            seen.append((trainer_step.CURRENT.get(), kwargs.get("global_step")))

    class Controller:
        config = tool_config = None

        def check_enable(self):
            return True

        check_this_rank = is_discrete_mode = check_enable

    server = object.__new__(cls)
    server.node_rank = server.replica_rank = 0
    server.profiler_controller = Controller()
    server.engine = server.tokenizer_manager = Engine()
    asyncio.run(server.set_global_steps(4))
    asyncio.run(server.start_profile())
    asyncio.run(server.start_profile(global_step=9))
    assert [(s.weights_version, s.global_step) for s, _ in seen] == [(4, None), (4, 9)]
    assert [s.step(1) for s, _ in seen] == [5, 9]
    assert trainer_step.CURRENT.get() is None  # only inside the call


def test_shapes_match_the_record(module):
    from tests.helpers.installed import tree_record_path

    now = shapes.current(PATCH, module)
    updating = os.environ.get("RLPROF_UPDATE_SHAPES") == "1"
    # `make shapes` rewrites the tree's record (each engine's run adds its own server's patch)
    path = (tree_record_path if updating else shapes.record_path)(trainer.NAME, trainer.TESTED[-1])
    record = json.loads(path.read_text()) if path.exists() else {"patches": {}}
    if updating:
        record["patches"][PATCH.name] = now
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(shapes.record_text(trainer.NAME, trainer.TESTED[-1], record["patches"]))
        return
    assert record["patches"].get(PATCH.name) == now, (
        f"{path} drifted from verl {trainer.TESTED[-1]}: run `make shapes` if intended")


def test_revert_restores_verl_and_an_untested_old_release_stays_off(module, caplog):
    cls = getattr(module, CLASS)
    wrapped = cls.start_profile
    original = wrapped.__wrapped__
    PATCH.revert()
    try:
        assert cls.start_profile is original
        with caplog.at_level(logging.WARNING):
            assert not apply_guarded(PATCH, module, "0.8.0")
        assert cls.start_profile is original
        assert "verl 0.8.0 is outside the range" in caplog.text
    finally:
        assert apply_guarded(PATCH, module, trainer.version())
    assert cls.start_profile.__wrapped__ is original


def test_doctor_reports_the_integration(module, monkeypatch):
    from rlprof_plugins.cli.doctor_trainers import diagnose_trainer, render_trainer

    monkeypatch.setenv("RLPROF_PROFILER_CONFIG", json.dumps({"trainer_step_offset": 0}))
    report = diagnose_trainer("verl")
    states = {p.name: p.state for p in report.patches}
    other = {"vllm": "sglang", "sglang": "vllm"}[ENGINE]
    assert states == {PATCH.name: "applies", f"verl.servers.{other}": "off"}, report.patches
    assert report.ok and report.tested and report.version == trainer.TESTED[-1]
    assert "verl.plugins entry point 'rlprof'" in report.plugin_loading
    assert "trainer_step_offset 0 (from RLPROF_PROFILER_CONFIG)" in report.step_source
    assert render_trainer(report).startswith(f"verl {report.version}\n  supported; a tested release")


@pytest.mark.parametrize("page", ["README.md", "docs/verl.md"])
def test_the_documented_verl_overrides_compose(page):
    """The verl overrides of the README's quick start and of docs/verl.md, composed with verl's own Hydra
    config: steps 36 and 37 profiled in discrete mode on every rollout replica (``all_ranks``: verl's
    default traces replica 0 only), and the RLPROF_PROFILER_CONFIG they set is a valid rlprof configuration
    beside the profiler config verl builds (a window, by stage, sampled stacks). docs/verl.md gives the command
    for vLLM and for SGLang."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / page).read_text()
    blocks = [m.group(0) for m in re.finditer(r"```bash\npython -m verl.trainer.main_ppo .*?\n```", readme, re.S)]
    engines = [_composed(block) for block in blocks]
    assert engines == (["vllm"] if page == "README.md" else ["vllm", "sglang"]), engines


def _composed(block: str) -> str:
    """One documented command's overrides composed with verl's config and checked; the rollout engine."""
    import shlex
    from pathlib import Path

    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    from rlprof_plugins.config.options import parse_options, split_options

    lines = [line for line in block.splitlines()[1:-1] if not line.startswith("rlprof ")]
    overrides = [word for line in lines[1:] for word in shlex.split(line.rstrip("\\ "))]
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    assert list(cfg.global_profiler.steps) == [36, 37]
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.profiler)
    torch_tool = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.profiler.tool_config.torch)
    assert (rollout.tool, rollout.enable, rollout.all_ranks, rollout.save_path, torch_tool.discrete) == (
        "torch", True, True, "/traces", True)
    env = OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env)["env_vars"]
    given = json.loads(env["RLPROF_PROFILER_CONFIG"])
    native, ours = split_options({"torch_profiler_with_stack": False, **given}, ["torch_profiler_with_stack"])
    options = parse_options(ours)
    assert (options.step_start, options.step_end, options.by_stage) == (10, 74, True)
    assert options.backend_keys["python_stacks"] == "sampled"
    assert "rlprof report /traces --compare 36 37" in block
    assert "torch_profiler_dir" not in given  # one rule for the folders: verl's save_path alone
    return cfg.actor_rollout_ref.rollout.name
