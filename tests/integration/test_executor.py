"""Executors (testbed/util/executor.py): a sweep run as Ray tasks on a local two-worker Ray cluster gives the local
pool's results.csv bit for bit, records a failing run the same way, and a sweep interrupted under one executor
resumes under the other to the uninterrupted results."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.runner import Runner
from testbed.sweep import sweep_file
from testbed.util.executor import RayExecutor, make

pytestmark = pytest.mark.integration

SWEEP = """
[base]
task = "bandit"
steps = {steps}
log_every = 10
batch_size = 4
seeds = 2

[grid]
recipe = ["pg", "{second}"]
"""

BOOM = '''
from dataclasses import dataclass

from testbed.stabilizers import Surrogate, register


@register
@dataclass
class Boom(Surrogate):
    """Raises on its first use: a run with an internal error."""

    name = "boom"

    def per_token(self, terms):
        raise RuntimeError("boom in the surrogate")
'''


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A Ray cluster of this machine only: two worker CPUs, loopback, no dashboard; its logs in a temporary
    directory (a loop's "resuming" line is read there)."""
    ray = pytest.importorskip("ray", reason="the Ray executor needs the optional extra ray (pip install -e '.[ray]')")
    temp = tmp_path_factory.mktemp("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
             _temp_dir=str(temp), configure_logging=False)
    yield temp
    ray.shutdown()


def _sweep(tmp_path: Path, steps: int = 30, second: str = "dg") -> Path:
    path = tmp_path / "s.toml"
    path.write_text(SWEEP.format(steps=steps, second=second))
    return path


def _worker_log(temp: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in temp.glob("session_*/logs/worker-*.err"))


def test_a_sweep_as_ray_tasks_gives_the_local_pools_results_bit_for_bit(ray_cluster, tmp_path, capsys):
    path = _sweep(tmp_path)
    common = ["--no-progress", "--loop-size", "1"]
    assert main(["sweep", str(path), "--out", str(tmp_path / "local"), *common]) == 0
    assert main(["sweep", str(path), "--out", str(tmp_path / "ray"), "--workers", "2", "--executor", "ray", *common]) == 0
    local, ray = (tmp_path / d / "results.csv" for d in ("local", "ray"))
    assert ray.read_bytes() == local.read_bytes()
    assert len(ray.read_text().splitlines()) == 1 + 4 * 3  # 4 runs x 3 logged steps
    assert sorted(p.name for p in (tmp_path / "ray" / "runs").glob("*.json")) == \
        sorted(p.name for p in (tmp_path / "local" / "runs").glob("*.json"))  # the same run ids


def test_a_failing_run_under_ray_is_recorded_as_under_the_local_pool(ray_cluster, tmp_path, capsys, monkeypatch):
    from testbed.stabilizers.registry import IMPORTS_ENV

    monkeypatch.delenv(IMPORTS_ENV, raising=False)  # --import lists the module there: gone after the test
    (tmp_path / "boom_surrogate.py").write_text(BOOM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    path = _sweep(tmp_path, steps=10, second="boom")
    args = ["--import", "boom_surrogate", "--no-progress", "--loop-size", "2"]
    assert main(["sweep", str(path), "--out", "local", *args]) == 1
    local_err = capsys.readouterr().err
    assert main(["sweep", str(path), "--out", "ray", "--workers", "2", "--executor", "ray", *args]) == 1
    ray_err = capsys.readouterr().err
    assert "error: 2 of 4 run(s) failed" in ray_err and "RuntimeError: boom in the surrogate" in ray_err
    assert ray_err.replace("'ray'", "'local'").replace("ray/runs", "local/runs") == local_err
    assert (tmp_path / "ray" / "results.csv").read_bytes() == (tmp_path / "local" / "results.csv").read_bytes()
    for log in (tmp_path / "ray" / "runs").glob("*.log"):
        assert "RuntimeError: boom in the surrogate" in log.read_text()
    assert sorted(p.name for p in (tmp_path / "ray" / "runs").glob("*.log")) == \
        sorted(p.name for p in (tmp_path / "local" / "runs").glob("*.log"))


def test_a_sweep_stopped_under_the_local_pool_resumes_under_ray_exactly(ray_cluster, tmp_path, monkeypatch, capsys):
    path = _sweep(tmp_path)
    sweep_file(path, out=tmp_path / "ref", progress=False, loop_size=2)
    publish = Runner.publish  # a terminal's Ctrl-C once the first loop has published version 12:
    monkeypatch.setattr(Runner, "publish", lambda self, t: [publish(self, t), t == 12 and signal.raise_signal(signal.SIGINT)])
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        sweep_file(path, out=out, progress=False, loop_size=2)
    assert "saved 2 run(s) at step 13 of 30" in capsys.readouterr().err
    assert len(list((out / "checkpoints").glob("loop-*.pt"))) == 1
    monkeypatch.setattr(Runner, "publish", publish)
    sweep_file(path, out=out, progress=False, loop_size=2, workers=2, executor=make("ray"))
    assert "resuming 2 run(s) at step 13 of 30" in _worker_log(ray_cluster)
    assert (out / "results.csv").read_bytes() == (tmp_path / "ref" / "results.csv").read_bytes()
    assert not (out / "checkpoints").exists()


class _StopOnceStarted(RayExecutor):
    """Ray, with a Ctrl-C as soon as the jobs report their first steps."""

    def run(self, fn, jobs, workers, threads=1, on_done=None):
        asked: list[float] = []

        def first(done: float) -> None:
            if not asked:
                asked.append(done)
                signal.raise_signal(signal.SIGINT)

        return super().run(fn, jobs, workers, threads, on_done=first)


@pytest.mark.slow  # loops long enough to be stopped while they train
def test_a_sweep_stopped_under_ray_resumes_under_the_local_pool_exactly(ray_cluster, tmp_path, capsys):
    path = _sweep(tmp_path, steps=2000)
    sweep_file(path, out=tmp_path / "ref", progress=False, loop_size=2)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        sweep_file(path, out=out, progress=False, loop_size=2, workers=2, executor=_StopOnceStarted())
    saved = list((out / "checkpoints").glob("loop-*.pt"))
    assert len(saved) == 2 and not list((out / "runs").glob("*.json"))  # both loops saved mid-way
    capsys.readouterr()
    sweep_file(path, out=out, progress=False, loop_size=2)
    assert capsys.readouterr().err.count("resuming 2 run(s) at step") == 2
    assert (out / "results.csv").read_bytes() == (tmp_path / "ref" / "results.csv").read_bytes()


def test_executor_flags_refuse_bad_values_in_one_line(tmp_path, capsys, monkeypatch):
    path = _sweep(tmp_path)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--address", "127.0.0.1:6379"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --address '127.0.0.1:6379' is for --executor ray (a Ray cluster's address); the local pool takes none"]
    assert main(["sweep", str(path), "--out", str(out), "--executor", "dask"]) == 2
    assert "--executor: invalid choice: 'dask'" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed
    assert main(["sweep", str(path), "--out", str(out), "--executor", "ray"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: --executor ray needs Ray, which is not installed: pip install")
    assert not out.exists()  # nothing written


def test_an_address_where_no_cluster_answers_is_refused_before_anything_is_written(tmp_path, capsys):
    pytest.importorskip("ray", reason="the Ray executor needs the optional extra ray (pip install -e '.[ray]')")
    import socket

    with socket.socket() as free:  # a loopback port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    out = tmp_path / "out"
    assert main(["sweep", str(_sweep(tmp_path)), "--out", str(out), "--executor", "ray", "--address",
                 f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --address '127.0.0.1:{port}': no Ray cluster answers there")
    assert not out.exists()


@pytest.mark.slow  # eight trainer processes, each importing the LLM stack: about a minute on a quiet machine
def test_a_study_as_ray_tasks_trains_the_runs_the_local_pool_does(ray_cluster, tmp_path, capsys):
    """llm_scale's study on the same executors: its search under Ray finishes the same runs, with the same
    accuracies, as under the local pool."""
    import llm_scale.study as study

    dry = Path(__file__).resolve().parents[2] / "sweeps" / "llm" / "dry_tiny.toml"
    common = ["--budget-s", "600", "--parallel", "2", "--search-only", "--force-cell", "1,1e-3"]
    tables = {}
    for name in ("local", "ray"):
        runs, out = str(tmp_path / name / "runs"), str(tmp_path / name / "out")
        assert study.main([str(dry), "--runs", runs, "--out", out, "--executor", name, *common]) == 0
        tables[name] = (tmp_path / name / "out" / "runs.csv").read_text().splitlines()
    keep = [i for i, c in enumerate(tables["local"][0].split(",")) if c in ("key", "arm", "seed", "finished", "accuracy")]
    pick = {name: [[row.split(",")[i] for i in keep] for row in rows[1:]] for name, rows in tables.items()}
    assert sum(row[-2] == "True" for row in pick["ray"]) == 4  # the search's four runs; no comparison run started
    assert pick["ray"] == pick["local"]
