"""Post-training from Python: the online GRPO loop of examples/python/grpo_loop.py."""
import json
import sys

from conftest import ROOT, launch


def test_the_grpo_loop_raises_the_reward_and_the_trainer_agrees_with_the_generator(tmp_path):
    """30 iterations at pipe 2 of generate (in flight, KV cache, a seed per sample), a
    rule-based reward, group-normalised advantages and a policy-gradient step: the mean reward
    of the last 10 iterations is above that of the first 10, and the trainer's log-probability
    of every generated token is the generator's up to rounding (under 1e-5, fp32)."""
    example = ROOT / "examples" / "python" / "grpo_loop.py"
    curve = tmp_path / "curve.jsonl"
    run = launch(2, [sys.executable, example, "--iterations", "30", "--out", curve], tmp_path)
    records = [json.loads(line) for line in curve.read_text().splitlines()]
    assert [r["iteration"] for r in records] == list(range(1, 31))
    rewards = [r["mean_reward"] for r in records]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.05, (first, last, run.stdout[-2000:])
    gaps = [r["largest_logprob_gap"] for r in records]
    assert 0 < max(gaps) < 1e-5, gaps
    assert sum(line.startswith("iteration ") for line in run.stdout.splitlines()) == 30
