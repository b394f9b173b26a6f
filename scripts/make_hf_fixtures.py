#!/usr/bin/env python3
"""Writes the Hugging Face test fixtures under tests/data/hf/ (docs/hf_models.md).

Each fixture is a tiny model of one family with random weights, saved by
transformers itself (config.json + model.safetensors), and golden.safetensors:
  input_ids  (T,)    the token ids fed to the model (stored as F32, exact)
  logits     (T, V)  transformers' float32 logits for them, one forward pass
The project's tests (tests/convert/hf_test.cpp) load the model with its own
code and compare logits. Not run by CI: needs PyTorch and transformers, which
scripts/hf_fixtures.sh installs into a virtual environment.

It also trains small byte-level BPE tokenizers with the `tokenizers` library
in the configurations of the families' real files (GPT-2/Pythia, Qwen2,
Llama 3, SmolLM) and stores, under tokenizers/NAME/, tokenizer.json,
tokenizer_config.json and golden_ids.json: fixed texts and the ids the
library gives them (encode(text, add_special_tokens=False)).

Usage: python3 scripts/make_hf_fixtures.py OUT_DIR   (default tests/data/hf)
"""
import json
import math
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

VOCAB = 96


def randomise(model, seed):
    """Every parameter random (norm gains near 1), so that each one matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                gain = "norm" in name or name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                    or name.endswith("ln_f.weight")
                if gain and name.endswith("weight"):
                    p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed" in name or "wte" in name or "wpe" in name or "lm_head" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[0] if "transformer.h." in name else p.shape[1]  # GPT-2's Conv1D is (in, out)
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))


def llama_like(model_type, layers=2, **kw):
    base = dict(hidden_size=64, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=64, rms_norm_eps=1e-6,
                tie_word_embeddings=False)
    base.update(kw)
    return transformers.AutoConfig.for_model(model_type, **base)


def fixtures():
    # name -> (config, tokens fed, dtype saved)
    f = {}
    f["gpt2"] = (transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=VOCAB,
                                          activation_function="gelu_new"), 64, torch.float32)
    f["neox"] = (transformers.GPTNeoXConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64,
                                             rotary_pct=0.25, use_parallel_residual=True), 64, torch.float32)
    f["neox_sequential"] = (transformers.GPTNeoXConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                                        intermediate_size=128, vocab_size=VOCAB,
                                                        max_position_embeddings=64, rotary_pct=0.5,
                                                        use_parallel_residual=False), 64, torch.float32)
    f["llama"] = (llama_like("llama"), 64, torch.float32)
    f["llama_bf16"] = (llama_like("llama"), 64, torch.bfloat16)
    f["llama_linear"] = (llama_like("llama", 1, rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                                 "rope_theta": 10000.0}), 64, torch.float32)
    f["llama_dynamic"] = (llama_like("llama", 1, max_position_embeddings=32,
                                     rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                      "rope_theta": 10000.0}), 80, torch.float32)
    f["llama_yarn"] = (llama_like("llama", 1, max_position_embeddings=128,
                                  rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": 32,
                                                   "rope_theta": 10000.0}), 96, torch.float32)
    f["llama_yarn_mscale"] = (llama_like("llama", 1, max_position_embeddings=128,
                                         rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                                          "original_max_position_embeddings": 32, "mscale": 2.0,
                                                          "mscale_all_dim": 1.0, "beta_fast": 16.0,
                                                          "beta_slow": 2.0, "rope_theta": 500.0}),
                              96, torch.float32)
    f["llama3"] = (llama_like("llama", 1, max_position_embeddings=256,
                              rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                                               "rope_theta": 10000.0}), 96, torch.float32)
    f["mistral"] = (llama_like("mistral", sliding_window=16), 64, torch.float32)
    f["qwen2"] = (llama_like("qwen2", tie_word_embeddings=True), 64, torch.float32)
    f["qwen3"] = (llama_like("qwen3", head_dim=16, tie_word_embeddings=True), 64, torch.float32)
    # Heads wider and narrower than hidden_size / num_attention_heads (Qwen3-0.6B: 16 heads of 128 in 1024).
    f["qwen3_wide_heads"] = (llama_like("qwen3", head_dim=32), 64, torch.float32)
    f["llama_narrow_heads"] = (llama_like("llama", 1, head_dim=8, num_key_value_heads=4), 64, torch.float32)
    # Qwen's sliding-window layers: from max_window_layers on (Qwen2), or as layer_types lists them (Qwen3).
    f["qwen2_sliding"] = (llama_like("qwen2", use_sliding_window=True, sliding_window=16, max_window_layers=1),
                          64, torch.float32)
    f["qwen3_sliding"] = (llama_like("qwen3", head_dim=16, use_sliding_window=True, sliding_window=8,
                                     layer_types=["sliding_attention", "full_attention"]), 64, torch.float32)
    # YaRN's exact ramp (truncate false, as gpt-oss ships it), a base that puts both ends inside the head.
    f["llama_yarn_exact"] = (llama_like("llama", 1, max_position_embeddings=128,
                                        rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                                         "original_max_position_embeddings": 32, "truncate": False,
                                                         "beta_fast": 8.0, "beta_slow": 0.5, "rope_theta": 100.0}),
                             96, torch.float32)
    return f


# The split patterns of Qwen2's and Llama 3's tokenizer.json files.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "In the beginning was the Word, and the Word was with God.",
    "The quick brown fox jumps over the lazy dog; don't you think it's 42 times faster?",
    "Numbers: 3.14159, 2718281828, 1,000,000 and 0x1F.",
    "She said: \"I'll go\", we'd agree, they've seen, you're right, I'm here.",
    "Tabs\tand  double  spaces\n\nand new lines\r\nend.",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u2014 \u6771\u4eac \u00fcber stra\u00dfe \U0001F600!",
]

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog; don't you think it's 42 times faster?",
    "  leading spaces and trailing   ",
    "line one\nline two\n\n\tindented 12345 67",
    "I'll say we've won 1,000,000 times!!! ... ok?",
    "Hello<|endoftext|>world<|endoftext|>",
    "MiXeD CaSe WORDS and 'QUOTES' 'S 'LL",
    "Caf\u00e9 na\u00efve \u2014 \u6771\u4eac \U0001F600 \u00fcber",
]


def tokenizer_fixtures(out):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, normalizers, processors, Regex
    cases = {}

    def byte_level_bpe(pre, specials, normalizer=None, ignore_merges=False):
        tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
        tok.pre_tokenizer = pre
        tok.decoder = decoders.ByteLevel()
        if normalizer is not None:
            tok.normalizer = normalizer
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(CORPUS * 20, trainer=trainer)
        return tok

    t = byte_level_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), ["<|endoftext|>"])
    cases["gpt2_style"] = (t, {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"}, TEXTS)
    t = byte_level_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], normalizer=normalizers.NFC())
    nfc_texts = TEXTS + ["<|im_start|>user\nhi<|im_end|>", "Cafe\u0301 A\u030a \u212b \u1100\u1161\u11a8 d\u0307\u0323"]
    cases["qwen2_style"] = (t, {"eos_token": "<|endoftext|>", "bos_token": None}, nfc_texts)
    t = byte_level_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|begin_of_text|>", "<|end_of_text|>"], ignore_merges=True)
    t.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", t.token_to_id("<|begin_of_text|>"))])
    cases["llama3_style"] = (t, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
                             TEXTS + ["<|begin_of_text|>x<|end_of_text|>"])
    t = byte_level_bpe(pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
                       ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    cases["smollm_style"] = (t, {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"}, TEXTS)

    for name, (tok, cfg, texts) in cases.items():
        d = os.path.join(out, "tokenizers", name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as fh:
            json.dump(dict(cfg, tokenizer_class="PreTrainedTokenizerFast"), fh, indent=2)
            fh.write("\n")
        ids = [tok.encode(x, add_special_tokens=False).ids for x in texts]
        with open(os.path.join(d, "golden_ids.json"), "w") as fh:
            json.dump({"texts": texts, "ids": ids}, fh, ensure_ascii=True)
            fh.write("\n")
        print(f"tokenizer {name}: vocab {tok.get_vocab_size()}, {sum(len(i) for i in ids)} ids over {len(texts)} texts")


def nfc_cases(out):
    """Strings and their NFC by Python's unicodedata, for the project's NFC."""
    import random
    import unicodedata
    rng = random.Random(5)
    pools = [range(0x41, 0x7B), range(0xC0, 0x180), range(0x300, 0x370), range(0x591, 0x5C8), range(0x1100, 0x1113),
             range(0x1161, 0x1176), range(0x11A8, 0x11C3), range(0xAC00, 0xAC40), range(0x1E00, 0x1F00),
             range(0x1F00, 0x2000), range(0x958, 0x960), range(0x2126, 0x212C), range(0xF900, 0xF910),
             range(0x3099, 0x309B), range(0x304B, 0x3060), range(0x1D15E, 0x1D165)]
    cases = ["e\u0301", "\u212b", "d\u0307\u0323", "\u1100\u1161\u11a8", "\u0958", "a\u0328\u0301",
             "\u1e0b\u0323", "q\u0307\u0323", "\u304b\u3099", "\U0001D15F"]
    for _ in range(400):
        n = rng.randint(1, 12)
        cases.append("".join(chr(rng.choice(rng.choice(pools))) for _ in range(n)))
    with open(os.path.join(out, "tokenizers", "nfc_cases.json"), "w") as fh:
        json.dump({"unicode": unicodedata.unidata_version,
                   "cases": [[x, unicodedata.normalize("NFC", x)] for x in cases]}, fh, ensure_ascii=True)
        fh.write("\n")
    print(f"nfc cases: {len(cases)}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/hf"
    tokenizer_fixtures(out)
    nfc_cases(out)
    torch.manual_seed(0)
    summary = {}
    for i, (name, (config, T, dtype)) in enumerate(fixtures().items()):
        config._attn_implementation = "eager"
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
        randomise(model, 1000 + i)
        model = model.to(dtype).eval()
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        ids = torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(2000 + i))
        # The golden logits come from the saved files, read back by transformers
        # in float32 (a bf16 file's weights widened exactly; RoPE's frequencies
        # recomputed in float32 as for any downloaded model).
        reloaded = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                                     attn_implementation="eager").eval()
        with torch.no_grad():
            logits = reloaded(ids).logits[0].contiguous()
        save_file({"input_ids": ids[0].to(torch.float32), "logits": logits}, os.path.join(d, "golden.safetensors"))
        summary[name] = {"tokens": T, "params": sum(p.numel() for p in model.parameters()),
                         "dtype": str(dtype), "max_abs_logit": float(logits.abs().max())}
        print(f"{name}: {summary[name]}")
    with open(os.path.join(out, "fixtures.json"), "w") as fh:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "fixtures": summary}, fh,
                  indent=2)
        fh.write("\n")


if __name__ == "__main__":
    main()
