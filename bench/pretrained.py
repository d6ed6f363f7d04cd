"""A GPT-2-small-sized checkpoint, loaded and run three ways: this app's model (core/pretrained.py), Hugging
Face's eager GPT-2, and TransformerLens's HookedTransformer; prints a table of times, memory and ratios.

Nothing is downloaded: the model is built from GPT-2 small's config (12 layers, 12 heads, d_model 768,
vocabulary 50,257, context 1,024) with random weights and saved as a Hugging Face folder (model.safetensors,
about 0.5 GB, with a small byte-level tokenizer beside it; the timings do not depend on the weights' values).
Each measurement runs in a fresh process (so its peak memory is its own), the three implementations
interleaved round by round, so a busy machine slows them alike. Rows, at each length:
- load: the folder to a ready model (ours: load_pretrained; Hugging Face: from_pretrained; TransformerLens:
  its model built from the same config, then the converted weights loaded into it, as its own
  from_pretrained does), and the process's peak RSS over the whole measurement;
- forward: logits of one sequence;
- patterns: logits and every layer's attention pattern (Hugging Face: output_attentions=True; ours and
  TransformerLens: run_with_cache of the pattern hooks);
- cache all: run_with_cache of every hook (not Hugging Face's: it has none).

    pip install -r requirements-bench.txt
    python bench/pretrained.py                       # 128, 512 and 1,024 tokens, 2 rounds
    python bench/pretrained.py --lengths 128 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPT2_SMALL = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
IMPLS = ("glassbox", "hf", "tl")
OPS = ("load", "forward", "patterns", "cache_all")
REPEATS = 3  # timed calls per operation in a measurement (after one untimed warm-up call); the median is kept


# ---------------------------------------------------------------------------------------------
# The folder


def build_folder(folder: Path) -> Path:
    """GPT-2 small's shape with random weights, saved as Hugging Face saves it, with a small tokenizer."""
    import torch
    import transformers as hf

    sys.path.insert(0, str(ROOT))
    from tests.core.pretrained_models import write_tokenizer

    if (folder / "model.safetensors").exists():
        return folder
    torch.manual_seed(0)  # Hugging Face initialises from the global generator: this script's own process
    model = hf.GPT2LMHeadModel(hf.GPT2Config(**GPT2_SMALL)).eval()
    model.save_pretrained(folder)
    write_tokenizer(folder, "bpe")
    return folder


# ---------------------------------------------------------------------------------------------
# One measurement, in its own process


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (VmHWM), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    """This process's resident memory now (VmRSS), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(fn) -> float:
    """Median seconds of REPEATS calls of fn, after one untimed call."""
    fn()
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(impl: str, folder: Path, length: int, device: str = "cpu", dtype: str = "float32") -> dict:
    """Load the folder with `impl` onto `device` in `dtype`, then time forward, patterns and cache-all at
    `length` tokens (on a GPU each call is synchronised before the clock stops)."""
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    torch_dtype = getattr(torch, dtype)
    ids = torch.randint(0, GPT2_SMALL["vocab_size"], (1, length), generator=torch.Generator().manual_seed(length))
    ids = ids.to(device)
    sys.path.insert(0, str(ROOT))
    import transformers as hf  # imported before the clock starts: loading is what is timed, not imports

    from core.pretrained import load_pretrained

    if impl == "tl":
        import transformer_lens as tl
        from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights
    before = rss_mb()
    t0 = time.perf_counter()
    if impl == "glassbox":
        model, _ = load_pretrained(folder, device=device, dtype=torch_dtype)
        load = time.perf_counter() - t0
        with torch.no_grad():
            ops = {"forward": lambda: model(ids),
                   "patterns": lambda: model.run_with_cache(ids, "blocks.*.attn.hook_pattern"),
                   "cache_all": lambda: model.run_with_cache(ids)}
    elif impl == "hf":
        model = hf.GPT2LMHeadModel.from_pretrained(folder, dtype=torch_dtype, attn_implementation="eager").eval()
        model = model.to(device)
        load = time.perf_counter() - t0
        ops = {"forward": lambda: model(ids),
               "patterns": lambda: model(ids, output_attentions=True)}
    else:
        hf_model = hf.GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32).eval()
        cfg = tl.HookedTransformerConfig(n_layers=12, d_model=768, n_ctx=1024, d_head=64, n_heads=12, d_mlp=3072,
                                         d_vocab=GPT2_SMALL["vocab_size"], act_fn="gelu_new",
                                         normalization_type="LN", positional_embedding_type="standard",
                                         default_prepend_bos=False)
        model = tl.HookedTransformer(cfg, move_to_device=False)
        model.load_state_dict(convert_gpt2_weights(hf_model, cfg), strict=False)
        del hf_model
        model = model.to(device)  # HookedTransformer.to takes a device or a dtype, one at a time
        model = (model.to(torch_dtype) if torch_dtype != torch.float32 else model).eval()
        load = time.perf_counter() - t0
        ops = {"forward": lambda: model(ids),
               "patterns": lambda: model.run_with_cache(ids, names_filter=lambda n: n.endswith("hook_pattern")),
               "cache_all": lambda: model.run_with_cache(ids)}
    out = {"load": load, "load_growth_mb": peak_rss_mb() - before}  # what loading added at its peak
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    with torch.no_grad():
        for name, fn in ops.items():
            out[name] = timed(lambda fn=fn: (fn(), sync()))
    if device.startswith("cuda"):
        out["gpu_peak_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def in_child(impl: str, folder: Path, length: int, device: str, dtype: str) -> dict:
    """`measure` in a fresh Python process (its own peak memory, its own imports)."""
    proc = subprocess.run([sys.executable, __file__, "--child", impl, str(folder), str(length), device, dtype],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1][:200] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# The table


def fmt(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def ratio(ours, theirs) -> str:
    return "-" if ours is None or theirs is None else f"{ours / theirs:.2f}x"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="128,512,1024", help="input lengths in tokens (default 128,512,1024)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; medians over them (default 2)")
    ap.add_argument("--folder", type=Path, help="where the GPT-2-sized folder is (made there if missing)")
    ap.add_argument("--impls", default=",".join(IMPLS), help="which implementations (default glassbox,hf,tl)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"),
                    help="the weights' dtype in memory (half precision: on a GPU)")
    ap.add_argument("--child", nargs=5, metavar=("IMPL", "FOLDER", "LENGTH", "DEVICE", "DTYPE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        impl, folder, length, device, dtype = args.child
        print(json.dumps(measure(impl, Path(folder), int(length), device, dtype)))
        return 0
    lengths = [int(x) for x in args.lengths.split(",")]
    impls = [i for i in args.impls.split(",") if i in IMPLS]
    folder = build_folder(args.folder or Path(tempfile.gettempdir()) / "glassbox-gpt2-small-random")
    weights_mb = (folder / "model.safetensors").stat().st_size / 2 ** 20
    results: dict = {}
    for r in range(args.rounds):
        for length in lengths:
            for impl in (impls if r % 2 == 0 else impls[::-1]):  # alternate the order round by round
                results.setdefault((impl, length), []).append(in_child(impl, folder, length, args.device, args.dtype))
                print(f"round {r + 1}, {length} tokens, {impl}: {results[(impl, length)][-1]}", file=sys.stderr, flush=True)

    def median(impl, length, key):
        values = [m[key] for m in results.get((impl, length), []) if key in m]
        return statistics.median(values) if values else None

    where = f"{os.environ.get('BENCH_THREADS', '2')} CPU threads" if args.device == "cpu" else args.device
    print(f"\n## A GPT-2-small-sized checkpoint ({weights_mb:.0f} MB of float32 weights on disk), {where}, "
          f"{args.dtype}, {args.rounds} interleaved rounds, medians ({time.strftime('%Y-%m-%d')})\n")
    print("| tokens | what | Glassbox | Hugging Face (eager) | TransformerLens 3.9 | Glassbox / HF | Glassbox / TL |")
    print("|---|---|---|---|---|---|---|")
    for length in lengths:
        for op in OPS:
            g, h, t = (median(i, length, op) for i in ("glassbox", "hf", "tl"))
            print(f"| {length} | {op.replace('_', ' ')} | {fmt(g)} | {fmt(h)} | {fmt(t)} | {ratio(g, h)} | {ratio(g, t)} |")
        mb = lambda v: "-" if v is None else f"{v:.0f} MB ({v / weights_mb:.2f}x the weights)"  # noqa: E731
        for key, label in (("load_growth_mb", "memory added by loading (peak)"), ("peak_rss_mb", "peak RSS, whole run"),
                           ("gpu_peak_mb", "GPU memory, peak")):
            if all(median(i, length, key) is None for i in IMPLS):
                continue
            g, h, t = (median(i, length, key) for i in ("glassbox", "hf", "tl"))
            print(f"| {length} | {label} | {mb(g)} | {mb(h)} | {mb(t)} | {ratio(g, h)} | {ratio(g, t)} |")
    errors = {f"{impl} at {length}": m["error"] for (impl, length), ms in results.items() for m in ms if "error" in m}
    for where, error in errors.items():
        print(f"\n{where}: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
