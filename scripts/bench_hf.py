#!/usr/bin/env python3
"""gpt bench --hf beside transformers' CPU forward, on one random model (docs/hf_models.md §10).

Makes a random-weight Llama model of SmolLM2-135M's shape (30 layers, 576
channels, 9 heads with 3 key/value heads, SwiGLU of 1536, 49152 tokens, tied
head) with max_position_embeddings 512, or with SHAPE qwen3-0.6b a Qwen3
model of Qwen3-0.6B's shape (28 layers, 1024 channels, 16 heads of 128 with
8 key/value heads, SwiGLU of 3072, 151936 tokens, tied head, QK-norm), saved
in float32 by transformers; runs
`gpt bench --hf` on it (read, load, eval at 1x and 4x), then times
transformers' forward pass (float32, eager and sdpa attention, no gradient,
the same thread count) at the same lengths, and prints tokens/s side by side.
Optional, like the fixtures: needs PyTorch and transformers.

Usage: python3 scripts/bench_hf.py [GPT_BINARY] [WORK_DIR] [THREADS] [SHAPE: smollm2-135m | qwen3-0.6b]
"""
import os
import re
import subprocess
import sys
import time

import torch
import transformers


def main():
    gpt = sys.argv[1] if len(sys.argv) > 1 else "build/gpt"
    work = sys.argv[2] if len(sys.argv) > 2 else "/tmp/gpt_bench_hf"
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else os.cpu_count()
    shape = sys.argv[4] if len(sys.argv) > 4 else "smollm2-135m"
    torch.set_num_threads(threads)
    if shape == "smollm2-135m":
        d = os.path.join(work, "llama135m")
        cfg = transformers.LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                       num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                       max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=True,
                                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    elif shape == "qwen3-0.6b":
        d = os.path.join(work, "qwen3_0.6b")
        cfg = transformers.Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                       vocab_size=151936, max_position_embeddings=512, rms_norm_eps=1e-6,
                                       tie_word_embeddings=True,
                                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    else:
        sys.exit(f"unknown SHAPE {shape!r}; valid: smollm2-135m, qwen3-0.6b")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        model.save_pretrained(d, safe_serialization=True)
    lengths = [512, 2048] if shape == "smollm2-135m" else [512]
    print(f"$ {gpt} bench --hf {d} --contexts {','.join(map(str, lengths))} --threads {threads}", flush=True)
    res = subprocess.run([gpt, "bench", "--hf", d, "--contexts", ",".join(map(str, lengths)), "--threads",
                          str(threads), "--min-seconds", "1"], check=True, capture_output=True, text=True)
    print(res.stdout, flush=True)
    ours = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"eval\s+T=(\d+) .*?, (\d+) tokens/s", res.stdout)}
    t0 = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    print(f"transformers from_pretrained: {time.perf_counter() - t0:.3f} s")
    for impl in ("eager", "sdpa"):
        model.config._attn_implementation = impl
        for T in lengths:
            ids = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(1))
            with torch.no_grad():
                model(ids)  # warm-up
                best = float("inf")
                for _ in range(2):
                    t = time.perf_counter()
                    model(ids)
                    best = min(best, time.perf_counter() - t)
            tps = T / best
            print(f"transformers {impl:5s} T={T}: {best:.3f} s, {tps:.0f} tokens/s; gpt eval / transformers = "
                  f"{ours.get(T, float('nan')) / tps:.2f}", flush=True)


if __name__ == "__main__":
    main()
