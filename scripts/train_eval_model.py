#!/usr/bin/env python3
"""Trains nibble's accuracy-study model: a ~57M-parameter Llama (head_dim 128, GQA 4:1, 16K context)
on Jane Austen's novels mixed with synthetic long-range key-value recall tasks, so that the
precision of the KV cache visibly matters (docs/ACCURACY.md).

    scripts/extract_corpus.sh .corpus/austen.txt                       # on any Debian machine
    python3 scripts/train_eval_model.py --corpus .corpus/austen.txt --out OUT_DIR
                                        [--tokenizer models/demo-austen] [--seed 20261129]
                                        [--steps-recall N] [--steps-short N] [--steps-long N] [--max-seconds S]
    python3 scripts/train_eval_model.py --corpus .corpus/austen.txt --dry-run   # data only, no torch

Runs on the GPU machine (torch, transformers, tokenizers; nothing is downloaded). Writes to OUT_DIR:
  config.json, generation_config.json   LlamaForCausalLM: hidden 768, 8 layers, 8 query heads and 2 KV
                                        heads of head_dim 128, SwiGLU 2048, RoPE theta 5e5, 16384 positions
  model.safetensors                     bf16 weights
  tokenizer.json, tokenizer_config.json the demo model's byte-level BPE (vocab 4096), copied
  heldout.txt                           the last 5% of the corpus's passages, never trained on: the
                                        perplexity/KL text of the study
  recipe.json                           everything needed to reproduce the run: arguments, seed, data
                                        mixture, steps, losses, retrieval probe, versions, sha256 of every file

Training data: every row is [T + 1] token ids: episodes separated by <|endoftext|>, packed while
room is left (so the training text fills little of a row and is not memorized), then a training-text
window up to T. Target positions carry an LM mask, an answer mask or neither (never both):
  lm         a window of the training text; LM loss on every token
  induct     a span of 4..32 random token ids, a gap (training text or random ids), the span again:
             only the second copy has a loss (answer), and only copying can predict it. Dense,
             distance-spanning supervision for the induction circuit every retrieval task needs
  lines      associative recall, dense: 1..24 lines "key 4821: 93017", then every key asked in a
             random order ("\nkey 4821:" then " 93017", answer loss)
  passkey    nibble eval's passkey prompt, verbatim (src/eval/passkey.h: intro, the synthetic filler,
             "The pass key is KEY. Remember it. KEY is the pass key." at a random depth, the question),
             then " KEY." (answer loss)
  multikey   nibble eval's multi-needle prompt, verbatim (src/eval/multi_needle.h), 1..16 named codes,
             then 1..4 of them asked one after the other, each question followed by its answer (the
             first question directly follows the haystack, as in nibble eval)
  haystack   the same needles, or lines "key 4821: 93017", scattered through training text, then 1..4
             questions (passkey style: one)
Random ids (induct) carry no loss; the other prompt tokens carry the LM loss; answer tokens only the
answer loss. loss = mean(LM tokens) + mean(answer tokens).

Three phases, a curriculum from dense short recall to long distances: `--steps-recall` steps of 64
rows of 512 tokens (mostly induct and lines episodes of 16..488 tokens: ~60 answer tokens per row,
where the eval formats alone give a handful), `--steps-short` steps of 32 rows of 2048 tokens
(64..2008), `--steps-long` steps of 4 rows of 16384 tokens (512..16344), both with the eval formats
in the lead. Episode lengths are log-uniform, so needles sit at every distance. Learning rate: linear
warm-up, constant, then linear decay over the last 40% of the run. With `--max-seconds`, each phase
trains for its share of the time (45/35/20%; the step counts become caps) and progress is the larger
of the step and the time fraction, so a slower machine still trains every context length. Batches
are built ahead by `--data-workers` forked processes (Python builds a 64 x 512 batch in about as long
as the GPU trains on it).

Why this mixture (docs/ACCURACY.md): two earlier recipes, with the eval formats alone and unpacked
rows (one episode, then training text), never learned to copy the answer (answer loss at chance after
1,497 steps) and memorized the 1M-token training text instead (held-out loss 7.78 nats/token).

Determinism: the data stream and the initialization are seeded (Python's random.Random(seed) for the
data, torch.manual_seed(seed) for the weights). The attention is torch's flash SDPA kernel, whose
backward accumulates with atomics: a re-run gives the same data and nearly, not bitwise, the same
weights (and --max-seconds may cut a phase at a different step); recipe.json records the checksums
of the run whose figures docs/ACCURACY.md reports.
"""
import argparse
import array
import collections
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import platform
import random
import re
import shutil
import sys
import time
from types import SimpleNamespace

EOT_ID = 0
VOCAB = 4096
MAX_POSITIONS = 16384
# Episode mixtures, by kind (weights). The recall phase is mostly dense copying; the others lead with
# nibble eval's own formats.
MIX_RECALL = {"induct": 0.35, "lines": 0.35, "passkey": 0.1, "multikey": 0.1, "haystack": 0.1}
MIXTURE = {"lm": 0.1, "induct": 0.1, "lines": 0.1, "passkey": 0.2, "multikey": 0.25, "haystack": 0.25}
# (name, rows T, rows per step, lowest episode length, mixture)
PHASES = [("recall", 512, 64, 16, MIX_RECALL), ("short", 2048, 32, 64, MIXTURE), ("long", 16384, 4, 512, MIXTURE)]
PEAK_LR, MIN_LR, WARMUP_STEPS, DECAY_FROM = 1.5e-3, 1.5e-4, 100, 0.6
# With --max-seconds, each phase trains for its share of the time (its step count is then a cap)
PHASE_SHARE = (0.45, 0.35, 0.20)
HELDOUT_FRACTION = 0.05

# --- nibble eval's retrieval prompts, verbatim (src/eval/retrieval.h, passkey.h, multi_needle.h) ---
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
PASSKEY_INTRO = ("There is an important piece of information hidden inside a lot of irrelevant text. Find it and "
                 "remember it. I will ask you about it.\n")
PASSKEY_QUESTION = "\nWhat is the pass key? The pass key is"
MULTI_INTRO = ("There are several secret codes hidden inside a lot of irrelevant text. Find them and remember "
               "them. I will ask you about one of them.\n")
NAMES = ["Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry",
         "Irene", "Jack", "Kate", "Leo", "Maria", "Nick", "Olga", "Peter"]
QA_TOKENS = 24  # room one question + answer takes at most (the longest name's question + " 12345.")


def passkey_needle(key):
    return f"The pass key is {key}. Remember it. {key} is the pass key. "


def multi_needle_text(name, value):
    return f"The secret code for {name} is {value}. "


def multi_question(name):
    return f"\nWhat is the secret code for {name}? The secret code for {name} is"


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def haystack(intro, filler_count, placed, question):
    """intro + filler sentences with needle texts after `after` sentences + question (build_haystack)."""
    parts = [intro]
    by_slot = {}
    for after, text in placed:
        by_slot.setdefault(min(max(after, 0), filler_count), []).append(text)
    for i in range(filler_count):
        parts.extend(by_slot.get(i, []))
        parts.append(FILLER)
    parts.extend(by_slot.get(filler_count, []))
    parts.append(question)
    return "".join(parts)


class PyBpe:
    """tokenizer.json's byte-level BPE in pure Python: the stand-in for `tokenizers` in --dry-run
    where that package is absent (same pre-tokenizer regex and merges; slow, for checks only)."""

    PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

    def __init__(self, path):
        import regex  # noqa: PLC0415 (only the dry run needs it)
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        self.vocab = j["model"]["vocab"]
        self.inverse = {i: s for s, i in self.vocab.items()}
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in j["model"]["merges"]]
        self.ranks = {m: i for i, m in enumerate(merges)}
        for t in j.get("added_tokens", []):
            self.vocab[t["content"]] = t["id"]
            self.inverse[t["id"]] = t["content"]
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        self.byte_char = {b: chr(c) for b, c in zip(bs, cs)}
        self.char_byte = {c: b for b, c in self.byte_char.items()}
        self.pattern = regex.compile(self.PATTERN)
        self.cache = {}

    def _bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, i = min(pairs)
            if rank == 1 << 30:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        ids = [self.vocab[p] for p in parts]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        ids = []
        for piece in self.pattern.findall(text):
            ids.extend(self._bpe("".join(self.byte_char[b] for b in piece.encode("utf-8"))))
        return SimpleNamespace(ids=ids)

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]

    def decode(self, ids):
        text = "".join(self.inverse[i] for i in ids)
        return bytes(self.char_byte.get(c, ord("?")) for c in text).decode("utf-8", "replace")

    def token_to_id(self, s):
        return self.vocab.get(s)


class Data:
    """The seeded stream of training rows (pure Python: lists of ints; the trainer makes tensors)."""

    def __init__(self, tok, train_text, train_ids, seed):
        self.tok = tok
        self.rng = random.Random(seed)
        self.train_text = train_text
        self.train_ids = train_ids  # list of ints
        self.paragraph_starts = [0] + [m.end() for m in re.finditer("\n\n", train_text)]
        # tokens one filler sentence adds inside a haystack (its trailing space joins the next word)
        self.filler_tokens = len(tok.encode(FILLER * 9).ids) - len(tok.encode(FILLER * 8).ids)
        self.chars_per_token = len(train_text) / len(train_ids)
        self.counts = {}
        self.answers = 0
        self.retries = 0

    def value(self):
        return str(10000 + self.rng.randrange(90000))

    def values(self, n):
        out = []
        while len(out) < n:
            v = self.value()
            if v not in out:
                out.append(v)
        return out

    def prompt_length(self, lo, hi):
        return int(math.exp(self.rng.uniform(math.log(lo), math.log(max(lo + 1, hi)))))

    def questions(self, n):
        return min(n, self.rng.choice([1, 1, 2, 3, 4]))

    # Each episode builder returns a list of pieces (text or token-id list, "lm" | "ans").
    def passkey(self, length, n=None, q=None):
        key = self.value()
        f = max(0, (length - 80) // self.filler_tokens)
        k = round(self.rng.random() * f)
        return [(haystack(PASSKEY_INTRO, f, [(k, passkey_needle(key))], PASSKEY_QUESTION), "lm"), (f" {key}.", "ans")]

    def multikey(self, length, n=None, q=None):
        n = n or self.rng.choice([1, 2, 3, 4, 4, 4, 6, 8, 8, 12, 16])
        q = q or self.questions(n)
        names = self.rng.sample(NAMES, n)
        values = self.values(n)
        asked = self.rng.sample(range(n), q)
        f = max(0, (length - 50 - 16 * n - QA_TOKENS * (q - 1)) // self.filler_tokens)
        placed = sorted((round(self.rng.random() * f), i) for i in range(n))
        text = haystack(MULTI_INTRO, f, [(a, multi_needle_text(names[i], values[i])) for a, i in placed],
                        multi_question(names[asked[0]]))
        pieces = [(text, "lm"), (f" {values[asked[0]]}.", "ans")]
        for i in asked[1:]:
            pieces += [(multi_question(names[i]), "lm"), (f" {values[i]}.", "ans")]
        return pieces

    def austen_window(self, chars):
        chars = max(0, chars)
        start = self.rng.choice(self.paragraph_starts)
        start = min(start, max(0, len(self.train_text) - chars))
        return self.train_text[start:start + chars]

    def haystack(self, length, n=None, q=None):
        """Needles at sentence ends of an Austen window; three styles of needle and question."""
        style = self.rng.choice(["passkey", "names", "lines"])
        n = 1 if style == "passkey" else self.rng.choice([1, 2, 4, 8, 16])
        q = self.questions(n)
        text = self.austen_window(int((length - 40 - 14 * n - QA_TOKENS * (q - 1)) * self.chars_per_token * 0.95))
        cuts = [m.end() for m in re.finditer(r"[.!?][ \n]", text)] or [len(text)]
        if style == "passkey":
            key = self.value()
            needles, intro, qa = [passkey_needle(key)], PASSKEY_INTRO, [(PASSKEY_QUESTION, f" {key}.")]
        elif style == "names":
            names = self.rng.sample(NAMES, n)
            values = self.values(n)
            needles = [multi_needle_text(a, b) for a, b in zip(names, values)]
            intro = MULTI_INTRO
            qa = [(multi_question(names[i]), f" {values[i]}.") for i in self.rng.sample(range(n), q)]
        else:
            keys = self.rng.sample(range(1000, 10000), n)
            values = self.values(n)
            needles = [f"\nkey {a}: {b}\n" for a, b in zip(keys, values)]
            intro = ""
            qa = [(f"\nkey {keys[i]}:", f" {values[i]}") for i in self.rng.sample(range(n), q)]
        at = sorted(self.rng.choice(cuts) for _ in needles)
        body, prev = [intro], 0
        for pos, needle in zip(at, needles):
            body += [text[prev:pos], needle]
            prev = pos
        body += [text[prev:], qa[0][0]]
        pieces = [("".join(body), "lm"), (qa[0][1], "ans")]
        for question, answer in qa[1:]:
            pieces += [(question, "lm"), (answer, "ans")]
        return pieces

    def induct(self, length, n=None, q=None):
        """A random span, a gap, the span again (answer): copying is the only way to predict it."""
        k = self.rng.randint(4, max(4, min(32, length // 3)))
        span = [self.rng.randrange(1, VOCAB) for _ in range(k)]
        gap = max(0, length - 2 * k)
        if self.rng.random() < 0.5:
            filler = (self.lm_window(gap), "lm")
        else:
            filler = ([self.rng.randrange(1, VOCAB) for _ in range(gap)], "ctx")
        return [(span, "ctx"), filler, (span, "ans")]

    def lines(self, length, n=None, q=None):
        """Associative recall, dense: key-value lines, then every key asked (random order)."""
        n = n or self.rng.randint(1, max(1, min(24, length // 34)))
        keys = self.rng.sample(range(1000, 10000), n)
        values = self.values(n)
        pieces = [("".join(f"\nkey {a}: {b}" for a, b in zip(keys, values)), "lm")]
        for i in self.rng.sample(range(n), q or n):
            pieces += [(f"\nkey {keys[i]}:", "lm"), (f" {values[i]}", "ans")]
        return pieces

    def lm_window(self, n):
        start = self.rng.randrange(0, len(self.train_ids) - n)
        return self.train_ids[start:start + n]

    def encode_episodes(self, episodes):
        """Token ids of every text piece (one encode_batch call), in place."""
        where = [(e, p) for e, ep in enumerate(episodes) for p, (x, _) in enumerate(ep) if isinstance(x, str)]
        encoded = self.tok.encode_batch([episodes[e][p][0] for e, p in where]) if where else []
        for (e, p), enc in zip(where, encoded):
            episodes[e][p] = (enc.ids, episodes[e][p][1])

    def episode(self, kind, length, limit, n=None, q=None):
        """One episode's pieces as token ids, at most `limit` tokens: drawn again, shorter, when the
        token estimate for `length` ran long. None if even short draws do not fit (a packed episode
        in a small room; some formats have a fixed minimum size)."""
        for _ in range(12):
            pieces = getattr(self, kind)(length, n, q)
            self.encode_episodes([pieces])
            if sum(len(x) for x, _ in pieces) <= limit:
                return pieces
            self.retries += 1
            length = int(length * 0.8)
        return None

    def batch(self, t, rows, lo, mixture=MIXTURE, kind=None, length=None, n=None, q=None):
        """(ids [rows][t+1], lm mask [rows][t], answer mask [rows][t]) as lists; masks by target position.
        Each row: episodes drawn from `mixture`, separated by <|endoftext|>, packed while at least
        `lo` + QA_TOKENS tokens are left, then training text. kind/length/n/q fix one unpacked episode
        per row (the retrieval probe)."""
        episode_kinds = [k for k in mixture if k != "lm"]
        weights = [mixture[k] for k in episode_kinds]
        ids, lm, ans = [], [], []
        for _ in range(rows):
            first = kind or self.rng.choices(list(mixture), weights=list(mixture.values()))[0]
            self.counts[first] = self.counts.get(first, 0) + 1
            if first == "lm":
                ids.append(list(self.lm_window(t + 1)))
                lm.append([1] * t)
                ans.append([0] * t)
                continue
            seq, spans = [], []  # spans: [begin, end, role] of the tokens without LM loss in seq
            k = first
            while True:
                room = t - len(seq) - 1  # the row holds t + 1 ids; one is left for <|endoftext|>
                size = length or self.prompt_length(lo, room - QA_TOKENS)
                pieces = self.episode(k, min(size, room - QA_TOKENS), room, n, q)
                if pieces is None:
                    assert seq, f"cannot fit a {k} episode into {t} tokens"
                    self.counts[k] -= 1
                    break
                for x, role in pieces:
                    if role != "lm":
                        spans.append((len(seq), len(seq) + len(x), role))
                    if role == "ans":
                        self.answers += 1
                    seq.extend(x)
                seq.append(EOT_ID)
                if kind or t - len(seq) < lo + 2 * QA_TOKENS:
                    break
                k = self.rng.choices(episode_kinds, weights=weights)[0]
                self.counts[k] = self.counts.get(k, 0) + 1
            assert len(seq) <= t + 1, (k, len(seq), t)
            seq.extend(self.lm_window(t + 1 - len(seq)))
            # target position p predicts seq[p + 1]: a token at b sits at target position b - 1
            a, m = [0] * t, [1] * t
            for b, e, role in spans:
                lo_p = max(b - 1, 0)
                m[lo_p:e - 1] = [0] * (e - 1 - lo_p)
                if role == "ans":
                    a[lo_p:e - 1] = [1] * (e - 1 - lo_p)
            ids.append(seq)
            ans.append(a)
            lm.append(m)
        return ids, lm, ans


_WORKER = {}  # the parent's Data, inherited by the forked batch workers


def make_batch(task):
    """One training batch, built in a worker process. (seed, phase, k) seeds its stream, so the k-th
    batch of a phase is the same whatever the number of workers or the timing. Returns the rows as
    bytes (int32 ids [rows][T+1], uint8 masks [rows][T]) and the episode counts."""
    seed, phase, k = task
    name, t, rows, lo, mixture = PHASES[phase]
    data = _WORKER["data"]
    data.rng = random.Random(f"{seed}/{name}/{k}")
    data.counts, data.answers, data.retries = {}, 0, 0
    ids, lm, ans = data.batch(t, rows, lo, mixture)

    def flat(code, x):
        return array.array(code, itertools.chain.from_iterable(x)).tobytes()
    return flat("i", ids), flat("B", lm), flat("B", ans), (data.counts, data.answers, data.retries)


def split_corpus(text):
    paragraphs = text.split("\n\n")
    n_held = int(len(paragraphs) * HELDOUT_FRACTION)
    return "\n\n".join(paragraphs[:-n_held]), "\n\n".join(paragraphs[-n_held:]), n_held, len(paragraphs)


def encode_stream(tok, text):
    sep = tok.encode("\n\n").ids
    out = []
    for i, e in enumerate(tok.encode_batch(text.split("\n\n"))):
        if i:
            out.extend(sep)
        out.extend(e.ids)
    return out


def show_rows(tok, ids, lm, ans, limit=6, file=sys.stdout):
    for r in range(min(limit, len(ids))):
        targets = ids[r][1:]
        answer_pos = [p for p, m in enumerate(ans[r]) if m]
        tail = ""
        if answer_pos:
            first = answer_pos[0]
            tail = tok.decode(ids[r][max(0, first - 24):first + 1])
        answer = tok.decode([targets[p] for p in answer_pos])
        print(f"  row {r}: lm targets {sum(lm[r])}, answer targets {len(answer_pos)} {answer!r} after ...{tail!r}",
              file=file, flush=True)


def dry_run(args):
    """Builds rows of every phase and checks them without torch: lengths, masks, answers after questions."""
    try:
        from tokenizers import Tokenizer  # noqa: PLC0415
        tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    except ImportError:
        tok = PyBpe(os.path.join(args.tokenizer, "tokenizer.json"))
    with open(args.corpus, encoding="utf-8") as f:
        text = f.read()
    if args.dry_run_chars:
        text = text[:args.dry_run_chars]
    train_text, _, _, _ = split_corpus(text)
    t0 = time.time()
    train_ids = encode_stream(tok, train_text)
    print(f"encoded {len(train_ids)} training tokens in {time.time() - t0:.1f} s", flush=True)
    data = Data(tok, train_text, train_ids, args.seed)
    print(f"filler sentence: {data.filler_tokens} tokens in context", flush=True)
    for name, t, rows, lo, mixture in PHASES:
        n_rows = min(rows, args.dry_run_rows)
        t0 = time.time()
        before = dict(data.counts)
        ids, lm, ans = data.batch(t, n_rows, lo, mixture)
        drawn = {k: v - before.get(k, 0) for k, v in data.counts.items() if v - before.get(k, 0)}
        print(f"phase {name}: {n_rows} rows of {t} in {time.time() - t0:.2f} s; episodes {drawn}; "
              f"answer tokens per row {sum(map(sum, ans)) / n_rows:.0f}, "
              f"LM tokens per row {sum(map(sum, lm)) / n_rows:.0f}", flush=True)
        for r in range(n_rows):
            assert len(ids[r]) == t + 1 and len(lm[r]) == t and len(ans[r]) == t, (name, r)
            assert all(0 <= x < VOCAB for x in ids[r]), (name, r)
            assert all(a + b <= 1 for a, b in zip(lm[r], ans[r])), (name, r)
        show_rows(tok, ids, lm, ans, limit=args.dry_run_show)
    for kind, length, n in (("passkey", 1024, 1), ("multikey", 4096, 4), ("passkey", 16000, 1)):
        ids, lm, ans = data.batch(16384 if length > 2048 else 2048, 2, 64, kind=kind, length=length, n=n, q=1)
        for r in range(2):
            assert ids[r][[p for p, m in enumerate(ans[r]) if m][-1] + 2] == EOT_ID, (kind, "not one episode")
            first = [p for p, m in enumerate(ans[r]) if m][0]
            print(f"probe {kind} {length}: answer at target position {first} "
                  f"({tok.decode(ids[r][first - 12:first + 1])!r} -> {tok.decode(ids[r][first + 1:first + 7])!r})")
            assert length * 0.8 < first <= length, (kind, length, first)
    print(f"rows drawn {data.counts}, answers {data.answers}, length retries {data.retries}")
    return 0


def make_model_config():
    import inspect  # noqa: PLC0415
    from transformers import LlamaConfig  # noqa: PLC0415
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        rope = {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}
    else:
        rope = {"rope_theta": 500000.0}
    return LlamaConfig(
        vocab_size=4096, hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=2, head_dim=128, max_position_embeddings=MAX_POSITIONS,
        **rope, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=True,
        attention_bias=False, mlp_bias=False, bos_token_id=0, eos_token_id=0, dtype="bfloat16")


def lr_at(step, progress):
    """Warm-up over WARMUP_STEPS, constant, then linear decay to MIN_LR from progress DECAY_FROM to 1."""
    if step < WARMUP_STEPS:
        return PEAK_LR * (step + 1) / WARMUP_STEPS
    if progress <= DECAY_FROM:
        return PEAK_LR
    return MIN_LR + (PEAK_LR - MIN_LR) * max(0.0, 1 - (progress - DECAY_FROM) / (1 - DECAY_FROM))


def train(args):
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the tokenizer is used in forked workers
    import tokenizers  # noqa: PLC0415
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
    from tokenizers import Tokenizer  # noqa: PLC0415
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415
    from transformers import GenerationConfig, LlamaForCausalLM  # noqa: PLC0415

    # flash first; memory-efficient attention only if transformers ever passes an explicit mask
    kernels = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    assert torch.cuda.is_available(), "train_eval_model.py needs a CUDA GPU (flash attention)"
    device = "cuda"

    with open(args.corpus, encoding="utf-8") as f:
        text = f.read()
    train_text, held_text, n_held, n_paragraphs = split_corpus(text)
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(held_text)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(args.tokenizer, name), os.path.join(args.out, name))
    tok_config_path = os.path.join(args.out, "tokenizer_config.json")
    with open(tok_config_path) as f:
        tok_config = json.load(f)
    tok_config["model_max_length"] = MAX_POSITIONS
    with open(tok_config_path, "w") as f:
        json.dump(tok_config, f, indent=2)
        f.write("\n")
    tok = Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))
    assert tok.token_to_id("<|endoftext|>") == EOT_ID

    train_ids, held_ids = encode_stream(tok, train_text), encode_stream(tok, held_text)
    data = Data(tok, train_text, train_ids, args.seed)
    print(f"data ready in {time.time() - t_start:.1f} s: {len(train_ids)} training tokens, {len(held_ids)} held-out; "
          f"filler sentence {data.filler_tokens} tokens", flush=True)
    example = Data(tok, train_text, train_ids, args.seed + 1)  # a separate stream: training data is unchanged
    print("examples:", flush=True)
    show_rows(tok, *example.batch(2048, 6, 64))
    # batch workers, forked before CUDA is initialized (they never touch it)
    _WORKER["data"] = data
    workers = max(1, min(args.data_workers, (os.cpu_count() or 2) - 2))
    pool = multiprocessing.get_context("fork").Pool(workers)
    print(f"{workers} batch workers", flush=True)

    def to_device(batch):  # the probe's batches (built here)
        ids, lm, ans = batch
        return (torch.tensor(ids, dtype=torch.int64).pin_memory().to(device, non_blocking=True),
                torch.tensor(lm, dtype=torch.uint8).pin_memory().to(device, non_blocking=True).float(),
                torch.tensor(ans, dtype=torch.uint8).pin_memory().to(device, non_blocking=True).float())

    def losses(model, ids, lm, ans):
        logits = model(input_ids=ids[:, :-1]).logits.float()  # [B, T, vocab]
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                               reduction="none").view_as(lm)
        lm_loss = (ce * lm).sum() / lm.sum().clamp(min=1)
        ans_loss = (ce * ans).sum() / ans.sum().clamp(min=1)
        # answer exact: every answer token of a row is the argmax (teacher forcing = greedy decoding)
        miss = (logits.argmax(-1) != ids[:, 1:]).float() * ans
        has = ans.sum(-1) > 0
        acc = (((miss.sum(-1) == 0) & has).float().sum() / has.float().sum().clamp(min=1))
        token_acc = 1 - miss.sum() / ans.sum().clamp(min=1)  # over every answer token of the batch
        return lm_loss, ans_loss, acc, token_acc

    torch.manual_seed(args.seed)
    config = make_model_config()
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config).to(device=device, dtype=torch.float32)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=PEAK_LR, betas=(0.9, 0.95), eps=1e-8, fused=True)
    plan = [args.steps_recall, args.steps_short, args.steps_long]
    total = sum(plan)
    done = [0, 0, 0]
    history, phase_starts, stopped_early, phase = [], {}, False, 0
    budget = args.max_seconds
    phase_ends = list(itertools.accumulate(PHASE_SHARE))  # fractions of the budget
    pending, issued = collections.deque(), [0, 0, 0]  # (phase, AsyncResult) in order; batches issued per phase

    def next_batch(phase):
        while pending and pending[0][0] != phase:  # prefetched for a phase that has ended
            pending.popleft()
        while len(pending) < 2 * workers:
            pending.append((phase, pool.apply_async(make_batch, ((args.seed, phase, issued[phase]),))))
            issued[phase] += 1
        ids, lm, ans, (counts, answers, retries) = pending.popleft()[1].get()
        for k, v in counts.items():
            data.counts[k] = data.counts.get(k, 0) + v
        data.answers += answers
        data.retries += retries
        t = PHASES[phase][1]

        def put(b, dtype, width):
            return torch.frombuffer(bytearray(b), dtype=dtype).view(-1, width).pin_memory().to(device, non_blocking=True)
        return (put(ids, torch.int32, t + 1).long(), put(lm, torch.uint8, t).float(), put(ans, torch.uint8, t).float())

    t0 = time.time()
    step = 0
    with sdpa_kernel(kernels):
        while True:
            elapsed = time.time() - t0
            if budget and phase < 2 and elapsed > budget * phase_ends[phase]:
                print(f"{elapsed:.0f} s: phase {PHASES[phase][0]}'s time share is spent after {done[phase]} of "
                      f"{plan[phase]} steps", flush=True)
                phase += 1
            while phase < 3 and done[phase] >= plan[phase]:
                phase += 1
            if phase == 3:
                break
            if budget and elapsed > budget + 5:
                stopped_early = True
                print(f"--max-seconds {budget:g} spent: stopped after {step} steps", flush=True)
                break
            name, t, rows, lo, mixture = PHASES[phase]
            phase_starts.setdefault(name, step)
            batch = next_batch(phase)
            progress = max(step / total, elapsed / budget if budget else 0.0)
            lr = lr_at(step, progress)
            for g in opt.param_groups:
                g["lr"] = lr
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                lm_loss, ans_loss, acc, token_acc = losses(model, *batch)
            opt.zero_grad(set_to_none=True)
            (lm_loss + ans_loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            done[phase] += 1
            if step % args.log_every == 0 or done[phase] == plan[phase]:
                entry = {"step": step, "phase": name, "T": t, "lr": round(lr, 6), "lm_loss": round(lm_loss.item(), 4),
                         "answer_loss": round(ans_loss.item(), 4), "answer_token_acc": round(token_acc.item(), 3),
                         "seconds": round(time.time() - t0, 1)}
                history.append(entry)
                print(json.dumps(entry), flush=True)
    pool.terminate()
    torch.cuda.synchronize()
    seconds = time.time() - t0

    @torch.no_grad()
    def heldout_loss(t=2048, rows=16):
        model.eval()
        n = min(rows, (len(held_ids) - 1) // t)
        batch = torch.tensor([held_ids[i * t:(i + 1) * t + 1] for i in range(n)], dtype=torch.int64, device=device)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            logits = model(input_ids=batch[:, :-1]).logits.float()
        model.train()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).item()

    @torch.no_grad()
    def probe():
        """Teacher-forced exact answers on fresh eval-format items (greedy decoding would give the same)."""
        model.eval()
        pdata = Data(tok, train_text, train_ids, args.seed + 2)
        out = []
        for kind, n in (("passkey", 1), ("multikey", 4)):
            for length in (1024, 4096, 16000):
                t = 2048 if length < 2048 else 16384
                rows = 16 if length < 2048 else 8
                exact, aloss = 0.0, 0.0
                for _ in range(rows // 4):
                    b = to_device(pdata.batch(t, 4, 64, kind=kind, length=length, n=n, q=1))
                    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                        _, a_loss, acc, _ = losses(model, *b)
                    exact += acc.item() * 4
                    aloss += a_loss.item() / (rows // 4)
                out.append({"task": kind, "needles": n, "length": length, "items": rows, "exact": int(round(exact)),
                            "answer_loss": round(aloss, 4)})
                print(f"probe {kind} (needles {n}) at {length} tokens: {int(round(exact))}/{rows} exact, "
                      f"answer loss {aloss:.3f}", flush=True)
        model.train()
        return out

    with sdpa_kernel(kernels):
        val = heldout_loss()
        print(f"trained {step} steps in {seconds:.1f} s; held-out loss {val:.4f} (2048-token windows)", flush=True)
        probes = probe()

    model = model.to(torch.bfloat16).cpu()
    model.config.dtype = torch.bfloat16
    model.save_pretrained(args.out, safe_serialization=True)
    GenerationConfig(bos_token_id=0, eos_token_id=0, do_sample=False, max_length=MAX_POSITIONS).save_pretrained(args.out)
    files = {name: sha256_of(os.path.join(args.out, name)) for name in sorted(os.listdir(args.out))
             if name != "recipe.json"}
    recipe = {
        "model": "eval-austen-57m",
        "script": "scripts/train_eval_model.py",
        "command": " ".join(["python3", "scripts/train_eval_model.py"] + sys.argv[1:]),
        "seed": args.seed,
        "parameters": params,
        "architecture": {"class": "LlamaForCausalLM", "hidden": 768, "layers": 8, "q_heads": 8, "kv_heads": 2,
                         "head_dim": 128, "intermediate": 2048, "rope_theta": 500000.0,
                         "max_position_embeddings": MAX_POSITIONS, "vocab": 4096, "tied_embeddings": True},
        "data": {"corpus": args.corpus, "corpus_sha256": sha256_of(args.corpus),
                 "heldout": f"last {HELDOUT_FRACTION:.0%} of the passages ({n_held} of {n_paragraphs})",
                 "train_tokens": len(train_ids), "heldout_tokens": len(held_ids), "mixture": {n: m for n, _, _, _, m in PHASES}, "packing": "episodes packed per row, then training text",
                 "rows_drawn": data.counts, "answers_drawn": data.answers, "length_retries": data.retries},
        "schedule": {"phases": [{"name": n, "rows": [b, t], "prompt_lengths": [lo, t - 16 - QA_TOKENS],
                                 "steps_planned": p, "steps_trained": d, "first_step": phase_starts.get(n)}
                                for (n, t, b, lo, _), p, d in zip(PHASES, plan, done)],
                     "steps_trained": step, "max_seconds": budget, "phase_share": PHASE_SHARE, "stopped_early_by_max_seconds": stopped_early,
                     "optimizer": "AdamW betas 0.9/0.95 wd 0.1 (matrices), clip 1.0",
                     "lr": {"peak": PEAK_LR, "min": MIN_LR, "warmup_steps": WARMUP_STEPS,
                            "shape": f"constant, linear decay from progress {DECAY_FROM} (progress = max(step, time) fraction)"},
                     "loss": "mean(LM targets) + mean(answer targets)",
                     "precision": "bf16 autocast, flash SDPA"},
        "train_seconds": round(seconds, 1),
        "final": history[-1] if history else None,
        "heldout_loss_2048": round(val, 4),
        "retrieval_probe": probes,
        "history": history,
        "device": torch.cuda.get_device_name(0),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "sha256": files,
    }
    with open(os.path.join(args.out, "recipe.json"), "w") as f:
        json.dump(recipe, f, indent=2)
        f.write("\n")
    print(f"model.safetensors sha256 {files['model.safetensors']}", flush=True)
    print(f"wrote {args.out} in {time.time() - t_start:.1f} s total", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", help="output directory (required unless --dry-run)")
    ap.add_argument("--tokenizer", default=os.path.join(os.path.dirname(__file__), "..", "models", "demo-austen"))
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--steps-recall", type=int, default=3000, help="steps of 64 x 512 tokens (a cap with --max-seconds)")
    ap.add_argument("--steps-short", type=int, default=1500, help="steps of 32 x 2048 tokens (a cap with --max-seconds)")
    ap.add_argument("--steps-long", type=int, default=400, help="steps of 4 x 16384 tokens (a cap with --max-seconds)")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="training time budget (0 = none): the phases get 45/35/20%% of it (their step counts "
                         "become caps); recipe.json records it")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--data-workers", type=int, default=8, help="processes building batches (capped at cores - 2)")
    ap.add_argument("--dry-run", action="store_true", help="build and check rows of every phase; no torch")
    ap.add_argument("--dry-run-rows", type=int, default=8)
    ap.add_argument("--dry-run-show", type=int, default=4)
    ap.add_argument("--dry-run-chars", type=int, default=0, help="use only this many corpus characters")
    args = ap.parse_args()
    if args.dry_run:
        return dry_run(args)
    if not args.out:
        ap.error("--out is required")
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
