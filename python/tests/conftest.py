"""Paths and launchers for the Python package's tests (run by ctest's `python` test, or by hand:
PYTHONPATH=python:build/python python -m pytest python/tests)."""
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("PIPETRAIN_BUILD_DIR", ROOT / "build"))
PIPETRAIN = pathlib.Path(os.environ.get("PIPETRAIN_BINARY", BUILD / "src" / "pipetrain"))
SCRIPT = pathlib.Path(__file__).resolve().parent / "gpt_pipe.py"


def environment(**extra):
    env = dict(os.environ, PIPETRAIN_THREADS="1", OMP_NUM_THREADS="1",
               PIPETRAIN_COMM_TIMEOUT="60",
               PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(BUILD / "python")]))
    env.update(extra)
    return env


class Run:
    def __init__(self, done, seconds, result):
        self.returncode, self.stdout, self.stderr = done.returncode, done.stdout, done.stderr
        self.seconds, self.result = seconds, result


def launch(ranks, command, cwd, check=True, timeout=600, **env):
    """`pipetrain launch -n RANKS -- COMMAND`, its output and time."""
    started = time.monotonic()
    done = subprocess.run([str(PIPETRAIN), "launch", "-n", str(ranks), "--", *map(str, command)],
                          cwd=cwd, env=environment(**env), capture_output=True, text=True,
                          timeout=timeout)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(map(str, command))} exited {done.returncode}:\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return Run(done, time.monotonic() - started, None)


def gpt(ranks, cwd, name, *arguments, check=True, **env):
    """gpt_pipe.py on RANKS ranks; its result (rank 0's JSON) as run.result."""
    out = pathlib.Path(cwd) / f"{name}.json"
    run = launch(ranks, [sys.executable, SCRIPT, "--out", out, *arguments], cwd, check=check,
                 **env)
    run.result = json.loads(out.read_text()) if out.exists() else None
    return run


def pipetrain_train(ranks, cwd, name, config):
    """`pipetrain train` of `config` on RANKS ranks; its per-step losses from the metrics."""
    path = pathlib.Path(cwd) / f"{name}.json"
    metrics = pathlib.Path(cwd) / f"{name}.jsonl"
    config = dict(config, log={"metrics": str(metrics)})
    path.write_text(json.dumps(config))
    launch(ranks, [PIPETRAIN, "train", "--config", path], cwd)
    return [json.loads(line)["loss"] for line in metrics.read_text().splitlines()
            if "loss" in json.loads(line)]


@pytest.fixture(scope="session")
def text(tmp_path_factory):
    """A folder of text for token windows."""
    folder = tmp_path_factory.mktemp("text")
    for name in ("Apache-2.0", "GPL-2"):
        (folder / name).write_bytes(pathlib.Path("/usr/share/common-licenses", name).read_bytes())
    return folder
