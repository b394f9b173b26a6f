#!/usr/bin/env python3
"""Round trip through the project and back into transformers (docs/hf_models.md §8).

For each fixture of tests/data/hf/ (scripts/make_hf_fixtures.py): import it
(gpt convert --from-hf), export the checkpoint again (gpt convert --to-hf,
float32 and bf16), load the exported directory with transformers, and compare
its logits for the golden tokens with the golden logits. Prints the largest
difference relative to the largest |logit| per fixture; exits 1 if a float32
export misses 1e-4. Optional, like the fixtures: needs PyTorch and transformers.

Usage: python3 scripts/check_hf_export.py [GPT_BINARY] [FIXTURES_DIR]
"""
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file


def main():
    gpt = sys.argv[1] if len(sys.argv) > 1 else "build/gpt"
    fixtures = sys.argv[2] if len(sys.argv) > 2 else "tests/data/hf"
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(fixtures)):
            d = os.path.join(fixtures, name)
            if not os.path.exists(os.path.join(d, "golden.safetensors")):
                continue
            golden = load_file(os.path.join(d, "golden.safetensors"))
            ids = golden["input_ids"].to(torch.long)[None]
            ckpt = os.path.join(tmp, name + ".bin")
            subprocess.run([gpt, "convert", "--from-hf", d, ckpt], check=True, capture_output=True)
            for bf16 in (False, True):
                out = os.path.join(tmp, name + ("_bf16" if bf16 else ""))
                subprocess.run([gpt, "convert", "--to-hf", ckpt, out] + (["--bf16"] if bf16 else []), check=True,
                               capture_output=True)
                model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                                          attn_implementation="eager").eval()
                with torch.no_grad():
                    logits = model(ids).logits[0]
                ref = golden["logits"]
                rel = float((logits - ref).abs().max() / ref.abs().max())
                print(f"{name:18s} {'bf16' if bf16 else 'f32 '} exported, reloaded by transformers: "
                      f"max |Δlogit| / max |logit| = {rel:.3g}")
                if not bf16:
                    worst = max(worst, rel)
    print(f"worst float32 round trip: {worst:.3g}")
    sys.exit(0 if worst <= 1e-4 else 1)


if __name__ == "__main__":
    main()
