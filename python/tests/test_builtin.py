"""The native families from Python: a transformers Qwen3 fine-tuned with LoRA at pipe 2 from a
Python script (pipetrain.pipe.from_pretrained, initialize, train_batch, export) equals the
same config under the CLI (pipetrain import, train, export); pipetrain.plan's layouts are
pipetrain plan's."""
import json
import pathlib
import subprocess
import sys

import pytest
import torch

from conftest import PIPETRAIN, ROOT, environment, launch, pipetrain_train

sys.path.insert(0, str(ROOT / "tests" / "hugging_face"))

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    """A tiny random transformers Qwen3 folder (families.py's)."""
    import families
    folder = tmp_path_factory.mktemp("qwen3") / "hf"
    families.tiny_model("qwen3", positions=32).save_pretrained(folder)
    return folder


def lora_config(text):
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
            "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
            "pipeline": {"stages": 2},
            "data": {"type": "text", "paths": [str(text)]},
            "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]}}


def test_a_qwen3_lora_fine_tune_from_python_equals_the_cli(tmp_path, qwen3, text):
    config = lora_config(text)
    script = ROOT / "python" / "tests" / "builtin_script.py"
    launch(4, [sys.executable, script, "--hf", qwen3, "--imported", tmp_path / "py-import",
               "--config", json.dumps(config), "--steps", "3", "--save", tmp_path / "py-save",
               "--export", tmp_path / "py-peft", "--out", tmp_path / "py.json"], tmp_path)
    ours = json.loads((tmp_path / "py.json").read_text())

    done = subprocess.run([str(PIPETRAIN), "import", "--hf", str(qwen3), "--out",
                           str(tmp_path / "cli-import")], env=environment(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    cli = pipetrain_train(4, tmp_path, "cli", dict(
        config, load=str(tmp_path / "cli-import"), save=str(tmp_path / "cli-save"),
        train_iters=3, eval_interval=0, sample={"tokens": 0}))
    done = subprocess.run([str(PIPETRAIN), "export", "--checkpoint", str(tmp_path / "cli-save"),
                           "--format", "peft", "--out", str(tmp_path / "cli-peft")],
                          env=environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    assert ours["stages"] == 2 and ours["optimizer"] is None
    assert ours["trained"] and all("lora_" in n for n in ours["trained"]), ours["trained"][:4]
    assert len(ours["losses"]) == len(cli) == 3
    for step, (x, y) in enumerate(zip(ours["losses"], cli), 1):
        assert abs(x - y) <= TOLERANCE * abs(y), f"step {step}: Python {x}, CLI {y}"
    metrics = ours["metrics"]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    # The callback's loss is the engine's double; train_batch returns it as a float32 tensor.
    assert [m["loss"] for m in metrics] == pytest.approx(ours["losses"], rel=1e-7)
    assert all(m["tokens_per_s"] > 0 and m["grad_norm"] > 0 for m in metrics), metrics[0]

    from safetensors.torch import load_file
    a = load_file(tmp_path / "py-peft" / "adapter_model.safetensors")
    b = load_file(tmp_path / "cli-peft" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and len(a) == 3 * 2 * 3  # 3 blocks, A and B, 3 linears
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=TOLERANCE, atol=1e-7), name
    assert any(t.abs().max() > 0 for n, t in a.items() if "lora_B" in n)  # trained, not fresh
    config_of = json.loads((tmp_path / "py-peft" / "adapter_config.json").read_text())
    assert config_of["r"] == 4 and config_of["lora_alpha"] == 8


def test_plan_returns_the_layouts_pipetrain_plan_prints(tmp_path):
    config = tmp_path / "model.json"
    config.write_text((ROOT / "examples" / "llama-7b.json").read_text())
    cluster = ROOT / "clusters" / "dgx-h100.json"
    done = subprocess.run([str(PIPETRAIN), "plan", "--config", str(config), "--cluster",
                           str(cluster), "--global-batch", "64", "--format", "json", "--top", "3",
                           "--zero", "1"], env=environment(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout)
    run = subprocess.run([sys.executable, "-c", (
        "import json, sys, pipetrain; rows = pipetrain.plan(sys.argv[1], sys.argv[2], 64, top=3, "
        "zero=1); print(json.dumps(rows))"), str(config), str(cluster)],
        env=environment(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)
    assert len(rows) == 3 and all(r["zero"] == 1 for r in rows)
    for row, want in zip(rows, expected):
        ready = row.pop("config")
        assert row == want
        assert ready["pipeline"]["stages"] == want["pipe"]
        assert ready["train_micro_batch_size_per_gpu"] == want["micro_batch"]
    refused = subprocess.run([sys.executable, "-c", (
        "import pipetrain, sys\n"
        "try:\n  pipetrain.plan(sys.argv[1], sys.argv[2], 64, schedule='none-such')\n"
        "except ValueError as e:\n  print(e)"), str(config), str(cluster)],
        env=environment(), capture_output=True, text=True, timeout=300)
    assert refused.stdout.startswith("--schedule must be"), refused.stdout + refused.stderr


def test_the_tensorboard_example_logs_every_step(tmp_path, qwen3, text):
    """examples/python/lora_tensorboard.py at pipe 2: each step's metrics in TensorBoard's
    event file, as its progress lines print them; the adapters exported for peft."""
    example = ROOT / "examples" / "python" / "lora_tensorboard.py"
    run = launch(2, [sys.executable, example, "--hf", qwen3, "--data", text, "--steps", "3",
                     "--config", json.dumps({"gradient_accumulation_steps": 2}),
                     "--tensorboard", tmp_path / "runs", "--save", tmp_path / "save",
                     "--export", tmp_path / "adapter"], tmp_path)
    printed = [float(line.split()[3]) for line in run.stdout.splitlines()
               if line.startswith("step ")]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(tmp_path / "runs"))
    events.Reload()
    losses = events.Scalars("train/loss")
    assert [e.step for e in losses] == [1, 2, 3]
    assert [e.value for e in losses] == pytest.approx(printed, abs=1e-4)
    assert {"train/grad_norm", "train/lr", "train/tokens_per_s"} <= set(events.Tags()["scalars"])
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()


def test_the_cli_loops_keys_are_refused_with_a_builtin_model():
    """train_iters, save, log.metrics, ... are pipetrain train's loop: from Python the script's."""
    from pipetrain.pipe import BuiltinModel
    model = BuiltinModel(load="imported")
    for config, key in (({"train_iters": 3}, "train_iters"), ({"save": "out"}, "save"),
                        ({"log": {"metrics": "m.jsonl"}}, "log.metrics")):
        with pytest.raises(ValueError, match=f"^pipetrain: {key} in the config belongs to "):
            model.config_with(config)
    kept = model.config_with({"log": {"peak_tflops": 100}, "pipeline": {"stages": 2}})
    assert kept["load"] == "imported" and kept["log"] == {"peak_tflops": 100}
