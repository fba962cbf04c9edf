#!/usr/bin/env python3
"""Writes a Llama-architecture checkpoint with random bf16 weights in the Hugging Face layout
(config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json), so
that `nibble serve` can be load-tested at a real model's shape where no real checkpoint can be
downloaded (the GPU machine has no network).

    scripts/make_random_checkpoint.py OUT_DIR [--shape llama3-8b|llama3-1b|tiny] [--seed N]
                                              [--max-position N] [--layers N]

The weights are N(0, 0.02) (RMSNorm weights 1), so the model's text is noise; what it costs to run
is the real model's: the same matrices, KV heads, head_dim and vocabulary. The tokenizer is a
byte-fallback BPE over the model's whole vocabulary: <unk>, <s>, </s>, the 256 byte tokens <0x00>..
<0xFF>, "▁", then "▁w<id>" for every other id (reachable only as ids: no merges), so any id a benchmark
sends or the model samples decodes to text.

With torch present (the GPU machine) the tensors are drawn there, on the GPU if it has one; without
it (a development machine) only small shapes are allowed and Python's own generator draws them.
"""
import argparse
import json
import os
import random
import struct
import sys

SHAPES = {
    # hidden, intermediate, layers, heads, kv heads, vocab
    "llama3-8b": dict(hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8, vocab=128256),
    "llama3-1b": dict(hidden=2048, intermediate=8192, layers=16, heads=32, kv_heads=8, vocab=128256),
    "tiny": dict(hidden=128, intermediate=256, layers=2, heads=4, kv_heads=2, vocab=1024),
}
STD = 0.02
PURE_PYTHON_LIMIT = 20_000_000  # parameters drawn without torch


def tensor_specs(s):
    """(name, shape, kind) in the order written; kind "norm" is all ones, "matrix" is N(0, STD)."""
    head_dim = s["hidden"] // s["heads"]
    specs = [("model.embed_tokens.weight", (s["vocab"], s["hidden"]), "matrix")]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        specs += [
            (p + "input_layernorm.weight", (s["hidden"],), "norm"),
            (p + "self_attn.q_proj.weight", (s["heads"] * head_dim, s["hidden"]), "matrix"),
            (p + "self_attn.k_proj.weight", (s["kv_heads"] * head_dim, s["hidden"]), "matrix"),
            (p + "self_attn.v_proj.weight", (s["kv_heads"] * head_dim, s["hidden"]), "matrix"),
            (p + "self_attn.o_proj.weight", (s["hidden"], s["heads"] * head_dim), "matrix"),
            (p + "post_attention_layernorm.weight", (s["hidden"],), "norm"),
            (p + "mlp.gate_proj.weight", (s["intermediate"], s["hidden"]), "matrix"),
            (p + "mlp.up_proj.weight", (s["intermediate"], s["hidden"]), "matrix"),
            (p + "mlp.down_proj.weight", (s["hidden"], s["intermediate"]), "matrix"),
        ]
    specs += [("model.norm.weight", (s["hidden"],), "norm"), ("lm_head.weight", (s["vocab"], s["hidden"]), "matrix")]
    return specs


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def bf16_bits(x):
    """float -> bf16 bit pattern, round to nearest even (finite inputs)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def pure_python_bytes(shape, kind, rng):
    n = numel(shape)
    if kind == "norm":
        return struct.pack(f"<{n}H", *([0x3F80] * n))  # bf16 1.0
    return struct.pack(f"<{n}H", *(bf16_bits(rng.gauss(0.0, STD)) for _ in range(n)))


class TorchSource:
    def __init__(self, seed):
        import torch

        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def bytes(self, shape, kind):
        torch = self.torch
        if kind == "norm":
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = (torch.randn(shape, generator=self.gen, device=self.device, dtype=torch.float32) * STD).to(torch.bfloat16)
        return t.contiguous().view(torch.uint8).cpu().numpy().tobytes()


def write_safetensors(path, specs, source):
    header, offset = {}, 0
    for name, shape, _ in specs:
        size = 2 * numel(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for i, (name, shape, kind) in enumerate(specs):
            data = source(shape, kind)
            assert len(data) == 2 * numel(shape), name
            f.write(data)
            if sys.stderr.isatty():
                print(f"\rmake_random_checkpoint: {i + 1}/{len(specs)} tensors", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return offset


def tokenizer_json(vocab_size):
    special = ["<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(special)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    vocab["▁"] = len(vocab)  # the word boundary, so that a space decodes as one
    while len(vocab) < vocab_size:
        vocab[f"▁w{len(vocab)}"] = len(vocab)
    added = [{"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, tok in enumerate(special)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                     {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    ap.add_argument("--layers", type=int, help="override the shape's layer count")
    ap.add_argument("--max-position", type=int, default=131072, help="max_position_embeddings (the context)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    s = dict(SHAPES[args.shape])
    if args.layers is not None:
        if args.layers < 1:
            ap.error(f"--layers must be >= 1, got {args.layers}")
        s["layers"] = args.layers
    if args.max_position < 1:
        ap.error(f"--max-position must be >= 1, got {args.max_position}")
    specs = tensor_specs(s)
    params = sum(numel(shape) for _, shape, _ in specs)
    try:
        torch_source = TorchSource(args.seed)
        source = torch_source.bytes
        where = f"torch on {torch_source.device}"
    except ImportError:
        if params > PURE_PYTHON_LIMIT:
            sys.exit(f"make_random_checkpoint: {params:,} parameters need torch (pure Python draws at most "
                     f"{PURE_PYTHON_LIMIT:,}); use --shape tiny here")
        rng = random.Random(args.seed)
        source = lambda shape, kind: pure_python_bytes(shape, kind, rng)  # noqa: E731
        where = "Python's random"

    os.makedirs(args.out_dir, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": s["hidden"],
        "intermediate_size": s["intermediate"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv_heads"],
        "head_dim": s["hidden"] // s["heads"],
        "hidden_act": "silu",
        "max_position_embeddings": args.max_position,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "vocab_size": s["vocab"],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(args.out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f, indent=2)
    with open(os.path.join(args.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(s["vocab"]), f, ensure_ascii=False)
    with open(os.path.join(args.out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "model_max_length": args.max_position}, f, indent=2)
    data_bytes = write_safetensors(os.path.join(args.out_dir, "model.safetensors"), specs, source)
    print(f"make_random_checkpoint: {args.out_dir}: {args.shape} ({s['layers']} layers), {params:,} parameters, "
          f"{data_bytes / 2**30:.2f} GiB of bf16, drawn with {where}, seed {args.seed}", file=sys.stderr)


if __name__ == "__main__":
    main()
