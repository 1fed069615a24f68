"""bench/gpu_llama.py without a GPU: its FLOP count against a hand computation, its out-of-memory
fallback and GEMM-rate parsing, and a dry run on the CPU through the built hspmd (HSPMD_BIN), with
PyTorch's row when an interpreter here has torch (Debian's python3-torch, say), else hspmd's alone.
ctest runs it as bench_gpu_llama_test."""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import gpu_llama  # noqa: E402
import model_flops  # noqa: E402


def load_config(path):
    with open(os.path.join(ROOT, path)) as f:
        return json.load(f)


class FlopCountTest(unittest.TestCase):
    def test_a_small_config_by_hand(self):
        # hidden 4, 2 heads of 2, 1 KV head, FFN 6, 1 layer, vocabulary 10: per layer q 4x4, o 4x4,
        # k 4x2, v 4x2, gate/up/down 3 x 4x6 = 16 + 16 + 8 + 8 + 72 = 120, lm head 10x4 = 40: N = 160.
        config = {"hidden_size": 4, "intermediate_size": 6, "num_hidden_layers": 1, "num_attention_heads": 2,
                  "num_key_value_heads": 1, "vocab_size": 10}
        self.assertEqual(model_flops.matrix_params(config), 160)
        # One sequence of 3 tokens: 6 x 160 x 3 = 2880; attention 3 x 1 layer x 2 x 3^2 x (2 x 2) = 216.
        self.assertEqual(model_flops.attention_flops(config, 1, 3), 216)
        self.assertEqual(model_flops.train_flops(config, 1, 3), 3096)
        # Two sequences: twice both terms.
        self.assertEqual(model_flops.train_flops(config, 2, 3), 2 * 3096)

    def test_the_benchmark_model(self):
        config = load_config("bench/llama-1b.json")
        # Per layer: q and o 2 x 2048 x 2048 = 8,388,608; k and v 2 x 2048 x 256 = 1,048,576; gate,
        # up and down 3 x 2048 x 5632 = 34,603,008; 44,040,192 x 22 layers = 968,884,224; the lm
        # head 32000 x 2048 = 65,536,000: N = 1,034,420,224.
        self.assertEqual(model_flops.matrix_params(config), 1_034_420_224)
        # With the embedding (65,536,000) and 45 norms of 2048: 1,100,048,384 parameters.
        self.assertEqual(gpu_llama.model_parameters(config), 1_100_048_384)
        # 4 sequences of 4096 tokens: 6 N x 16,384 tokens + 3 x 22 x 4 x 2 x 4096^2 x 2048.
        dense = 6 * 1_034_420_224 * 16_384
        attention = 3 * 22 * 4 * 2 * 4096 * 4096 * 2048
        self.assertEqual(dense, 101_687_645_700_096)
        self.assertEqual(attention, 18_141_941_858_304)
        self.assertEqual(model_flops.train_flops(config, 4, 4096), dense + attention)


class DriverLogicTest(unittest.TestCase):
    def test_out_of_memory_halves_the_batch_until_it_fits(self):
        tried = []

        def run(batch):
            tried.append(batch)
            if batch > 2:
                raise gpu_llama.OutOfMemory(f"requested {batch} GiB")
            return {"batch": batch}

        result, batch, notes = gpu_llama.with_batch_fallback(8, run)
        self.assertEqual(tried, [8, 4, 2])
        self.assertEqual((result, batch), ({"batch": 2}, 2))
        self.assertEqual(notes, ["out of memory at batch 8: requested 8 GiB", "out of memory at batch 4: requested 4 GiB"])

    def test_out_of_memory_at_one_sequence_gives_no_result(self):
        def run(batch):
            raise gpu_llama.OutOfMemory("no")

        result, batch, notes = gpu_llama.with_batch_fallback(3, run)
        self.assertIsNone(result)
        self.assertEqual(batch, 1)
        self.assertEqual(len(notes), 2)  # 3, then 1

    def test_out_of_memory_messages(self):
        # hspmd's pool (core/block_pool.cc) and PyTorch's.
        self.assertTrue(gpu_llama.is_out_of_memory(
            "hspmd: error: out of memory on cuda:0: requested 1024 bytes with 0 bytes in use"))
        self.assertTrue(gpu_llama.is_out_of_memory("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"))
        self.assertFalse(gpu_llama.is_out_of_memory("hspmd: error: --device cuda: no CUDA device"))

    def test_step_metrics_skip_events_and_a_cut_off_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            with open(path, "w") as f:
                f.write('{"step": 1, "loss": 10.4, "step_seconds": 2.5, "peak_bytes": 100}\n'
                        '{"event": "eval", "step": 1, "val_loss": 10.3}\n'
                        '{"step": 2, "loss": 10.2, "step_seconds": 1.5, "peak_bytes": 120}\n'
                        '{"step": 3, "loss": 10.')  # the run was stopped while writing
            steps = gpu_llama.read_step_metrics(path)
        self.assertEqual([s["step"] for s in steps], [1, 2])
        self.assertEqual(gpu_llama.read_step_metrics(os.path.join(d, "missing.jsonl")), [])

    def test_the_best_bf16_gemm_of_a_benchmark_report(self):
        report = {"benchmarks": [
            {"name": "gemm/bf16/4096/4096/4096/manual_time", "run_type": "iteration", "FLOP/s": 6.0e14},
            {"name": "gemm/bf16/4096/11264/2048/manual_time", "run_type": "iteration", "FLOP/s": 7.5e14},
            {"name": "gemm/bf16_fp32_out/4096/4096/4096/manual_time", "run_type": "iteration", "FLOP/s": 9e14},
            {"name": "gemm/fp32/4096/4096/4096/manual_time", "run_type": "iteration", "FLOP/s": 5e13},
            {"name": "rms_norm_fwd/manual_time", "run_type": "iteration", "bytes/s": 4e12}]}
        self.assertAlmostEqual(gpu_llama.best_gemm_tflops(report), 750.0)
        self.assertIsNone(gpu_llama.best_gemm_tflops({"benchmarks": []}))


def torch_interpreter():
    """The first of this interpreter and Debian's that imports torch; '' when none does."""
    for python in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(python) and subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
            return python
    return ""


class DryRunTest(unittest.TestCase):
    def test_the_parameter_count_is_hspmds(self):
        for config in ("bench/llama-1b.json", "configs/llama-tiny.json"):
            info = subprocess.run([os.environ["HSPMD_BIN"], "model", "info", os.path.join(ROOT, config)],
                                  capture_output=True, text=True, check=True).stdout
            line = next(x for x in info.splitlines() if x.startswith("parameters: "))
            self.assertEqual(int(line.split()[1]), gpu_llama.model_parameters(load_config(config)), config)

    def test_a_dry_run_on_the_cpu_prints_the_table(self):
        hspmd = os.environ.get("HSPMD_BIN")
        self.assertTrue(hspmd, "HSPMD_BIN (the built hspmd) must be set; ctest sets it")
        python = torch_interpreter()
        with tempfile.TemporaryDirectory() as out:
            run = subprocess.run([sys.executable, os.path.join(ROOT, "bench/gpu_llama.py"), "--hspmd", hspmd,
                                  "--dry-run", "--python", python, "--out", out], capture_output=True, text=True,
                                 timeout=110)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            with open(os.path.join(out, "results.json")) as f:
                results = json.load(f)
        table = run.stdout
        self.assertIn("hspmd vs PyTorch training on the CPU (dry run)", table)
        self.assertIn("batch 2 x 64 tokens", table)
        config = load_config("configs/llama-tiny.json")
        flops = model_flops.train_flops(config, 2, 64)
        self.assertIn(f"model FLOPs per step {flops:.3e}", table)
        rows = {r["side"]: r for r in results["rows"]}
        h = rows["hspmd"]
        self.assertEqual(h["rounds"], 2)
        self.assertEqual(h["batch"], 2)
        self.assertGreater(h["peak_bytes"], 0)  # the host pool's high-water mark
        self.assertAlmostEqual(h["tokens_per_second"], 2 * 64 / h["step_time"])
        self.assertAlmostEqual(h["tflops"], flops / h["step_time"] / 1e12)
        self.assertAlmostEqual(h["mfu_peak"], h["tflops"] / 989.0)
        # Random tokens over 260 ids: the first loss is near ln 260 = 5.56.
        self.assertLess(abs(h["losses"][0] - math.log(260)), 0.5)
        self.assertRegex(table, r"\nhspmd +\| +2 +[0-9.]+ +[0-9]+ +1\.00 \|")  # the reference row
        if not python:
            self.assertIn("PyTorch rows are left out", table)
            self.assertEqual(len(rows), 1)
            return
        torch_rows = [r for name, r in rows.items() if name.startswith("torch ")]
        self.assertEqual(len(torch_rows), 1, table)  # eager; no torch.compile on the CPU
        t = torch_rows[0]
        self.assertEqual(t["rounds"], 2, table)
        self.assertAlmostEqual(t["hspmd_over_side_tokens"], t["step_time"] / h["step_time"])
        self.assertLess(abs(t["losses"][0] - math.log(260)), 0.5)
        # The GEMM rate torch measured makes the second MFU column.
        self.assertTrue(results["gemm_tflops"])
        gemm = max(results["gemm_tflops"].values())
        self.assertAlmostEqual(h["mfu_gemm"], h["tflops"] / gemm)
        self.assertIn(t["side"], table)


if __name__ == "__main__":
    unittest.main()
