#!/usr/bin/env python3
"""Cross-framework fixtures: small random-initialized Hugging Face models and transformers' logits.

Run on the GPU machine (torch + transformers installed, no network needed); it takes seconds on
the CPU:

    python3 scripts/make_hf_fixtures.py [--out tests/data/hf_fixtures]

For each architecture below it writes OUT/<name>/ with
    config.json, generation_config.json, model.safetensors   (float32, Hugging Face layout)
    prompts.json    {"prompts": [[ids...], ...]}                fixed prompt ids (no tokenizer)
    logits_<i>.npy  float32 [len(prompt i), vocab]              transformers' logits, eager attention
and OUT/manifest.json naming them with the transformers/torch versions. tests/e2e/model_hf_fixtures
loads every model with nibble (f32 KV cache) and compares the logits.

Weights: transformers' own init, then every matrix and bias redrawn ~ N(0, 0.08²) and every norm
weight ~ 1 + N(0, 0.1²) (seeded), so attention and the logits are far from uniform.
"""
import argparse
import json
import os
import struct
import sys

ARCHS = {
    # name: (config class, extra config fields)
    "llama3_untied": ("LlamaConfig", {
        "tie_word_embeddings": False,
        "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    }),
    "llama_tied": ("LlamaConfig", {"tie_word_embeddings": True, "rope_theta": 10000.0}),
    "mistral": ("MistralConfig", {"tie_word_embeddings": False, "rope_theta": 1000000.0, "sliding_window": None}),
    "qwen2_bias": ("Qwen2Config", {"tie_word_embeddings": True, "rope_theta": 1000000.0, "use_sliding_window": False}),
    "qwen3_qknorm": ("Qwen3Config", {"tie_word_embeddings": False, "rope_theta": 1000000.0, "use_sliding_window": False,
                                     "attention_bias": False}),
}

GEOMETRY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=64, max_position_embeddings=128, rms_norm_eps=1e-6,
                hidden_act="silu", bos_token_id=1, eos_token_id=2, initializer_range=0.02)

PROMPT_LENGTHS = [1, 9, 40]


def write_npy(path, rows):
    """float32 C-order .npy (format 1.0) of a list of equal-length lists, without numpy."""
    shape = (len(rows), len(rows[0]))
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % shape
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        for row in rows:
            f.write(struct.pack("<%df" % len(row), *row))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "hf_fixtures"))
    args = parser.parse_args()

    import torch
    import transformers

    torch.manual_seed(1234)
    gen = torch.Generator().manual_seed(99)
    prompts = [torch.randint(3, GEOMETRY["vocab_size"], (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    os.makedirs(args.out, exist_ok=True)
    manifest = {"transformers": transformers.__version__, "torch": torch.__version__, "models": {},
                "tolerance_note": "nibble f32 KV must match these logits within 1e-4 absolute"}
    for name, (config_class, extra) in ARCHS.items():
        fields = dict(GEOMETRY)
        fields.update(extra)
        if config_class == "Qwen2Config":
            # Older Qwen2 code derives head_dim = hidden / heads: give it hidden 128 / 2 heads = 64.
            fields.pop("head_dim")
            fields["hidden_size"] = 128
            fields["intermediate_size"] = 128
        config = getattr(transformers, config_class)(**fields)
        config._attn_implementation = "eager"
        model_class = getattr(transformers, config_class.replace("Config", "ForCausalLM"))
        model = model_class(config).to(torch.float32).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "norm" in pname:
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
                else:
                    p.copy_(0.08 * torch.randn(p.shape, generator=gen))
        out_dir = os.path.join(args.out, name)
        model.save_pretrained(out_dir, safe_serialization=True)
        # Legacy keys next to whatever this transformers version writes (rope_parameters in v5), so
        # every config.json reader sees rope_theta / rope_scaling.
        cfg_path = os.path.join(out_dir, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["rope_theta"] = fields["rope_theta"]
        cfg["rope_scaling"] = fields.get("rope_scaling")
        cfg["torch_dtype"] = "float32"
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
        if not os.path.exists(os.path.join(out_dir, "generation_config.json")):
            with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
                json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
        with open(os.path.join(out_dir, "prompts.json"), "w") as f:
            json.dump({"prompts": prompts}, f)
        for i, ids in enumerate(prompts):
            with torch.no_grad():
                logits = model(torch.tensor([ids]), use_cache=False).logits[0].to(torch.float32)
            write_npy(os.path.join(out_dir, "logits_%d.npy" % i), logits.tolist())
        size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
        manifest["models"][name] = {"architecture": model_class.__name__, "bytes": size}
        print("%-14s %-20s %8d bytes" % (name, model_class.__name__, size))
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    total = sum(m["bytes"] for m in manifest["models"].values())
    print("total %d bytes in %s" % (total, os.path.abspath(args.out)))
    if total > 5 * 1024 * 1024:
        sys.exit("fixtures exceed 5 MB")


if __name__ == "__main__":
    main()
