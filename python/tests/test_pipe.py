"""A DeepSpeed pipeline script (gpt_pipe.py: bench/peers/gpt.py's GPT as LayerSpecs with a
tied head) on pipetrain's engine, checked against pipetrain's built-in C++ GPT (`pipetrain
train` from the script's step-0 checkpoint: the same initial weights), against itself under
other schedules and settings, and against DeepSpeed where bench/peers installed it."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from conftest import ROOT, environment, gpt, pipetrain_train

TOLERANCE = 1e-5
SIZES = {"vocab_size": 256, "context": 16, "d_model": 32, "heads": 4, "layers": 4}


def cli_config(text, load, save, **extra):
    config = {"model": {"type": "gpt", **SIZES}, "data": {"type": "text", "paths": [str(text)]},
              "train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.0}},
              # The script leaves it at DeepSpeed's default, which initialize() keeps.
              "gradient_clipping": 1.0,
              "pipeline": {"stages": 2}, "train_iters": 4, "eval_interval": 0,
              "save_interval": 2, "sample": {"tokens": 0}, "load": str(load), "save": str(save)}
    for key, value in extra.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return config


def only(folder, tag, to):
    """A checkpoint folder holding `folder`'s `tag` alone, as its latest (what --load reads)."""
    shutil.copytree(pathlib.Path(folder, tag), pathlib.Path(to, tag))
    pathlib.Path(to, "latest").write_text(tag)
    return to


def weights(folder, tag):
    tensors = {}
    for path in sorted(pathlib.Path(folder, tag).glob("layer_*.safetensors")):
        for name, tensor in load_file(path).items():
            tensors[f"{path.stem}.{name}"] = tensor.float()
    assert tensors, f"no layer files in {folder}/{tag}"
    return tensors


def assert_close(actual, expected, what, tolerance=TOLERANCE):
    assert len(actual) == len(expected), f"{what}: {actual} vs {expected}"
    for step, (a, e) in enumerate(zip(actual, expected), 1):
        assert abs(a - e) <= tolerance * max(1.0, abs(e)), f"{what}, step {step}: {a} vs {e}"


def assert_same_weights(folder, other, tag, what):
    mine, theirs = weights(folder, tag), weights(other, tag)
    assert mine.keys() == theirs.keys(), what
    worst = max((mine[k] - theirs[k]).abs().max().item() for k in mine)
    assert worst <= TOLERANCE, f"{what}: weights differ by {worst}"


@pytest.fixture(scope="module")
def base(tmp_path_factory, text):
    """The script at pipe 2 x data 2 under 1F1B (checkpoints at steps 0, 2 and 4), and the
    built-in GPT trained by `pipetrain train` from the script's step 0 (checkpoint at 2, 4)."""
    work = tmp_path_factory.mktemp("base")
    python = gpt(4, work, "python", "--text", text, "--save", work / "python", "--save-at",
                 "0,2,4").result
    init = only(work / "python", "step_0", work / "init")
    cli = pipetrain_train(4, work, "cli", cli_config(text, init, work / "cli"))
    return {"work": work, "init": init, "python": python["losses"], "cli": cli}


def test_python_layers_train_as_the_builtin_gpt(base):
    assert_close(base["python"], base["cli"], "script vs pipetrain train")
    assert_same_weights(base["work"] / "python", base["work"] / "cli", "step_4",
                        "script vs pipetrain train")


@pytest.mark.parametrize("schedule", ["interleaved", "zbv"])
def test_other_schedules(base, text, tmp_path, schedule):
    run = gpt(4, tmp_path, schedule, "--text", text, "--save", tmp_path / "ckpt", "--save-at",
              "4", "--config", json.dumps({"pipeline": {"schedule": schedule, "chunks": 2}}))
    assert_close(run.result["losses"], base["python"], schedule)
    assert_same_weights(tmp_path / "ckpt", base["work"] / "python", "step_4", schedule)


def test_zero_checkpointing_type_partition_and_groups(base, text, tmp_path):
    """ZeRO 1, every layer recomputed, type:GptBlock, AdamW with two groups (decay 0.1 and 0,
    Megatron's split) against `pipetrain train` with the same settings ("auto" exemptions)."""
    # seed_layers: the script builds the base's initial weights at any partition.
    run = gpt(4, tmp_path, "zero1", "--text", text, "--interval", "1", "--partition",
              "type:GptBlock", "--optimizer", "adamw-groups",
              "--config", json.dumps({"zero_optimization": {"stage": 1}}))
    cli = pipetrain_train(4, tmp_path, "cli-zero1", cli_config(
        text, base["init"], tmp_path / "cli",
        optimizer={"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}},
        zero_optimization={"stage": 1},
        pipeline={"stages": 2, "activation_checkpoint_interval": 1,
                  "partition_method": "type:GptBlock"}))
    assert_close(run.result["losses"], cli, "ZeRO 1 with groups vs pipetrain train")


def test_zero_3(base, text, tmp_path):
    run = gpt(4, tmp_path, "zero3", "--text", text,
              "--config", json.dumps({"zero_optimization": {"stage": 3}}))
    assert_close(run.result["losses"], base["python"], "ZeRO 3")


def test_bf16_as_the_builtin_gpt(base, text, tmp_path):
    run = gpt(4, tmp_path, "bf16", "--text", text, "--config", json.dumps({"bf16": {"enabled": True}}))
    cli = pipetrain_train(4, tmp_path, "cli-bf16", cli_config(
        text, base["init"], tmp_path / "cli", bf16={"enabled": True}))
    # Both in bfloat16 with fp32 masters, but not the same operators (PyTorch's
    # scaled_dot_product_attention against the built-in GPT's): equal to bfloat16's rounding.
    assert_close(run.result["losses"], cli, "bf16 vs pipetrain train in bf16", tolerance=1e-3)


def test_zero_2_fp16_as_the_builtin_gpt(base, text, tmp_path):
    """ZeRO 2 with fp16 and dynamic loss scaling (starting at 2^8) against `pipetrain train` with
    the same keys."""
    settings = {"zero_optimization": {"stage": 2},
                "fp16": {"enabled": True, "initial_scale_power": 8}}
    run = gpt(4, tmp_path, "fp16", "--text", text, "--config", json.dumps(settings))
    cli = pipetrain_train(4, tmp_path, "cli-fp16", cli_config(
        text, base["init"], tmp_path / "cli", **settings))
    # fp16 activations, and not the same attention operators: equal to fp16's rounding.
    assert_close(run.result["losses"], cli, "ZeRO 2 in fp16 vs pipetrain train", tolerance=1e-3)
    assert run.result["loss_scale"] == 256  # fp16's scaler ran (no overflow in 4 steps)


def test_checkpoints_pass_both_ways(base, text, tmp_path):
    """pipetrain train resumes the script's step 2, and the script resumes train's step 2: both
    go on to the unbroken run's losses."""
    step_2 = only(base["work"] / "python", "step_2", tmp_path / "python-2")
    cli = pipetrain_train(4, tmp_path, "cli", cli_config(text, step_2, tmp_path / "cli"))
    assert_close(cli, base["python"][2:], "pipetrain train from the script's step 2")
    from_cli = only(base["work"] / "cli", "step_2", tmp_path / "from-cli")
    run = gpt(4, tmp_path, "resumed", "--text", text, "--load", from_cli)
    assert_close(run.result["losses"], base["python"][2:], "the script from train's step 2")


def test_data_read_as_deepspeed_reads_it(tmp_path):
    """next() once per micro-batch on the first and last stages only; eval_batch's logits on the
    last stage."""
    run = gpt(3, tmp_path, "three", "--stages", "3", "--steps", "2", "--partition", "uniform",
              "--eval")
    assert run.result["next_calls"] == [16, 0, 16]
    assert run.result["eval"]["logits"] == [None, None, [1, 16, 256]]
    assert run.result["eval"]["loss"] > 0


def test_a_failing_layer_ends_every_rank_with_one_line(tmp_path):
    run = gpt(4, tmp_path, "raises", "--raise-at", "3", check=False)
    assert run.returncode != 0
    assert run.seconds < 90, f"the job took {run.seconds:.0f} s to end"
    lines = [line for line in run.stderr.splitlines() if "told to fail" in line]
    assert lines, run.stderr[-2000:]
    assert "layer 2 (RaisingBlock) on stage 0 raised ValueError: the block was told to fail" \
        in lines[0], lines[0]


def python_one_liner(code, **env):
    return subprocess.run([sys.executable, "-c", code], env=environment(**env),
                          capture_output=True, text=True, timeout=120)


def test_another_launcher_is_refused():
    done = python_one_liner("import pipetrain; pipetrain.init_distributed()", RANK="0",
                            WORLD_SIZE="1", LOCAL_RANK="0")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "another launcher (LOCAL_RANK is set)" in last and \
        "pipetrain launch, mpirun or srun" in last, last


def test_another_torch_is_refused():
    done = python_one_liner("import torch; torch.__version__ = '2.0.0'; import pipetrain")
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0
    assert "ImportError: pipetrain was built against torch" in last and "2.0.0" in last, last


def test_import_and_one_process():
    done = python_one_liner("import pipetrain; print(pipetrain.BUILT_TORCH)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == torch.__version__


PEERS = pathlib.Path(os.environ.get("PIPETRAIN_CACHE", pathlib.Path.home() / ".cache/pipetrain"),
                     "peers-venv", "bin", "python")


@pytest.mark.skipif(not PEERS.exists(), reason="DeepSpeed is not installed (bench/peers/setup)")
@pytest.mark.parametrize("stages,config", [
    (1, {}),
    # DeepSpeed 0.19.8 clips by a norm of stage 0's gradients alone at pipe > 1 (its
    # clip_grad_norm_ counts the parameters of model-parallel rank 0, and its pipeline grid's
    # model-parallel group is the whole pipe); pipetrain's norm counts every stage's. Compared
    # unclipped there.
    (2, {"gradient_clipping": 0.0})])
def test_the_same_script_under_deepspeed(tmp_path, stages, config):
    """The script's torch SGD with momentum, 20 steps of random tokens: the same initial
    weights on each rank and the same per-step losses (1e-5 relative); at pipe 1 with the
    gradients clipped to norm 1.0 by both (DeepSpeed's default, the script's config not naming
    it). (With AdamW the two optimizers' fp32 rounding, torch's foreach step against
    pipetrain's fused one, is amplified by Adam's normalisation on random labels: 5e-7 apart at
    step 2, 2e-4 by step 4.)"""
    arguments = ["--steps", "20", "--optimizer", "sgd", "--partition", "type:GptBlock",
                 "--stages", str(stages), "--config", json.dumps(config)]
    processes = []
    for rank in range(stages):
        env = environment(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(stages),
                          LOCAL_SIZE=str(stages), MASTER_ADDR="127.0.0.1", MASTER_PORT="29533",
                          DS_ACCELERATOR="cpu", GPT_PIPE_ENGINE="deepspeed", PYTHONPATH="")
        processes.append(subprocess.Popen(
            [str(PEERS), str(ROOT / "python/tests/gpt_pipe.py"), "--out", tmp_path / "ds.json",
             "--weights", tmp_path / "ds", *arguments], env=env, cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=600) for p in processes]
    assert all(p.returncode == 0 for p in processes), "\n".join(o[1][-2000:] for o in outputs)
    deepspeed = json.loads((tmp_path / "ds.json").read_text())["losses"]
    ours = gpt(stages, tmp_path, "ours", "--weights", tmp_path / "ours", *arguments)
    ours = ours.result["losses"]
    for rank in range(stages):
        a = torch.load(tmp_path / "ds" / f"rank_{rank}.pt")
        b = torch.load(tmp_path / "ours" / f"rank_{rank}.pt")
        assert a.keys() == b.keys(), (sorted(a), sorted(b))
        for name in a:
            assert torch.equal(a[name], b[name]), f"rank {rank}: {name} differs"
    assert len(ours) == len(deepspeed) == 20
    for step, (x, y) in enumerate(zip(ours, deepspeed), 1):
        assert abs(x - y) <= TOLERANCE * abs(y), f"step {step}: pipetrain {x}, DeepSpeed {y}"


def test_one_stage_equals_a_plain_pytorch_loop(tmp_path):
    """The engine's step against torch.optim.SGD over the same layers in a plain loop, both
    clipping the gradients to norm 1.0 (the first step's is 1.22: the clipping acts)."""
    run = gpt(1, tmp_path, "one", "--stages", "1", "--steps", "3", "--optimizer", "sgd",
              "--partition", "type:GptBlock")
    done = subprocess.run([sys.executable, str(ROOT / "python/tests/plain_loop.py"), "3"],
                          env=environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert_close(run.result["losses"], json.loads(done.stdout.strip().splitlines()[-1]),
                 "one stage vs a plain loop")
