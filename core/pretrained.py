"""Real checkpoints from a local folder (GPT-2, BERT, RoFormer, Llama, Mistral, Qwen2), converted INTO Glassbox's model.

A Hugging Face model folder holds config.json (the sizes), one or more .safetensors files (the weights,
under Hugging Face's names) and tokenizer files. This module reads them with json, safetensors and the
`tokenizers` library only (never `transformers`, never a pickle, nothing downloaded) and rebuilds the
model as a Glassbox `Transformer`, so every hook and page works on it. Read it top to bottom:

1. The public surface: `PretrainedError`, `ModelFolder`, `find_models` (GLASSBOX_MODELS_DIR and the
   Hugging Face cache; never a file outside them), `describe`, `load_pretrained`, and the masks a
   caller passes for padding (BERT) and for Mistral's sliding window.
2. config.json, read with a size bound; its "architectures" entry picks the family.
3. The families. Each turns config.json into TransformerConfig fields and `Recipe`s, one per Glassbox
   tensor: the checkpoint tensor it comes from, the shape that tensor must have, and how it is cut
   (GPT-2 fuses q, k and v in one matrix) or turned (GPT-2's Conv1D stores `[in out]`).
4. Bounds, before anything is allocated: the weights the config implies, by arithmetic alone, against
   GLASSBOX_MAX_MODEL_GB (default: half this machine's memory), and caps on layers and context.
5. The weight files: model.safetensors, or an index and its shards. Every header is checked against
   the recipes (names, shapes, dtypes) before a single weight is read.
6. Loading, tensor by tensor: float32 / float16 / bfloat16 -> float32 (or the dtype asked for, converted
   before it goes to the device), finite values only, assigned into a skeleton built on the meta
   device, so the model is held once (peak memory about 1.1x the weights).
7. `Tokenizer`: tokenizer.json, else GPT-2's vocab.json + merges.txt, else BERT's vocab.txt, with a
   readable label for every token.

Decisions a reader should know:
- BERT needs its masked-LM head (BertForMaskedLM / BertForPreTraining weights). A BertModel checkpoint
  ends in hidden states, not word predictions, so it is refused with a message that says so. RoFormer is
  BERT's layout with RoPE on pairs in place of the position table; its sin/cos table is a formula, not read.
- GPT2Model checkpoints load: GPT-2's unembedding is the (tied) token embedding, so nothing is missing.
- RoPE scaling (rope_type other than "default": llama3, yarn, linear, dynamic, ...) is refused by name.
- Mistral's sliding window (and Qwen2's, when switched on) is NOT applied by default: the window is a
  mask, and masks are per-call arguments. `describe()` notes it, and `sliding_window_masks(info, n)`
  gives the per-layer masks that make long inputs exact (`model(tokens, mask=...)`).
- Tensors a family is known to carry but that Glassbox does not use (GPT-2's causal-mask buffers,
  BERT's pooler and next-sentence head, old RoPE buffers, an untied copy of a tied matrix) are skipped;
  any other unknown tensor is refused, since it may be a feature Glassbox would silently drop.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

import torch
from safetensors import SafetensorError, safe_open
from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as Backend

from core.config import TransformerConfig
from core.model import Transformer

__all__ = ["PretrainedError", "ModelFolder", "Tokenizer", "find_models", "describe", "load_pretrained",
           "load_tokenizer", "padding_mask", "sliding_window_mask", "sliding_window_masks", "max_model_bytes",
           "SUPPORTED", "ENCODER_FAMILIES", "is_encoder_family"]

PathLike = Union[str, Path]

# Architecture (config.json's "architectures") -> family.
SUPPORTED = {
    "GPT2LMHeadModel": "gpt2", "GPT2Model": "gpt2",
    "BertForMaskedLM": "bert", "BertForPreTraining": "bert", "BertModel": "bert",
    "RoFormerForMaskedLM": "roformer", "RoFormerModel": "roformer",
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "llama",
}
ENCODER_FAMILIES = ("bert", "roformer")  # bidirectional masked-word models; the others predict the next token
STORED_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}  # safetensors' names -> torch's
LOAD_DTYPES = {torch.float32, torch.float16, torch.bfloat16}
MAX_LAYERS = 1024  # the deepest real models have ~130; more is a broken or hostile config.json
MAX_CONTEXT = 1 << 24  # positions a config may declare (RoPE tables are built lazily, learned ones counted)
MAX_FOLDERS = 1000  # subfolders find_models looks at per root
CONFIG_MAX_BYTES = 1 << 20  # config.json, index, tokenizer_config.json: a few KB in practice
TOKENIZER_MAX_BYTES = 100 << 20  # tokenizer.json of a 256k vocabulary is ~35 MB
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth", "model.ckpt",
                "consolidated.00.pth")


class PretrainedError(ValueError):
    """A folder Glassbox cannot open, with one or two sentences saying why and what to do."""


@dataclass(frozen=True)
class ModelFolder:
    """One model folder as `find_models` lists it: read from config.json and safetensors headers only."""

    path: Path
    name: str  # the folder's name, or "org/name" for the Hugging Face cache
    family: str  # "gpt2", "bert", "roformer" or "llama" ("" when config.json could not be read)
    architecture: str  # config.json's, e.g. "LlamaForCausalLM"
    parameters: int  # weights Glassbox would hold (a tied matrix counted once)
    context: int  # positions the model was trained for
    dtype: str  # how the weights are stored, e.g. "bfloat16"
    problem: Optional[str] = None  # why the folder cannot be opened; None when it can
    notes: tuple[str, ...] = ()  # things worth knowing that do not stop it opening
    sliding_window: Optional[int] = None  # attention window (Mistral, Qwen2), not applied by default
    sliding_layers: tuple[int, ...] = ()  # the layers that window applies to


# ---------------------------------------------------------------------------------------------
# 1. The public surface


def find_models(roots: Optional[list[PathLike]] = None) -> list[ModelFolder]:
    """Every model folder under the roots, sorted by name; broken ones listed with `problem` set.

    roots: folders to look in; None means GLASSBOX_MODELS_DIR (each subfolder with a config.json) and
    the Hugging Face cache (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub; layout
    `models--org--name/snapshots/<rev>/`). Only config.json and safetensors headers are read, never
    the weights, and no file outside a root is opened (a link that leads out is a `problem`).
    """
    found = []
    for root in _default_roots() if roots is None else [Path(r) for r in roots]:
        if not root.is_dir():
            continue
        for folder, name in _model_folders(root):
            found.append(describe(folder, name=name, root=root))
    return sorted(found, key=lambda m: (m.name.lower(), str(m.path)))


def describe(folder: PathLike, name: Optional[str] = None, root: Optional[PathLike] = None) -> ModelFolder:
    """What a folder holds, as a ModelFolder; never raises: a folder that cannot be opened gets `problem`.

    root: when given, every file read must resolve inside it (symbolic links included).
    """
    folder = Path(folder)
    name = name or folder.name
    root = Path(root).resolve() if root is not None else None
    try:
        found = _inspect(folder, root)
    except PretrainedError as exc:
        arch, family = _best_guess_architecture(folder, root)
        return ModelFolder(folder, name, family, arch, 0, 0, "", problem=str(exc))
    try:
        _tokenizer_files(folder, root)  # presence only; parsing waits for load_pretrained
        problem = None
    except PretrainedError as exc:
        problem = str(exc)
    t = found.translation
    return ModelFolder(folder, name, t.family, t.architecture, found.parameters, t.fields["max_len"],
                       found.stored_dtype, problem=problem, notes=t.notes, sliding_window=t.sliding_window,
                       sliding_layers=t.sliding_layers)


def load_pretrained(folder: Union[PathLike, ModelFolder], *, device: Union[str, torch.device] = "cpu",
                    dtype: Optional[torch.dtype] = None) -> tuple[Transformer, "Tokenizer"]:
    """The folder's model as a Glassbox Transformer (eval mode) and its tokenizer.

    dtype: the weights' dtype in memory, float32 by default (float16 / bfloat16 halve the memory, for a
    GPU). Raises PretrainedError, with a message a student can act on, for anything it cannot open.
    """
    path = folder.path if isinstance(folder, ModelFolder) else Path(folder)
    dtype = _load_dtype(dtype)
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise PretrainedError(f"device must be a torch device such as 'cpu' or 'cuda', got {device!r}") from exc
    found = _inspect(path, None, element_size=dtype.itemsize)
    tokenizer = load_tokenizer(path, found.translation.family, found.config)
    model = _build(found, device, dtype)
    return model, tokenizer


def is_encoder_family(family: str) -> bool:
    """Whether models of this family read the whole input at once and fill masked words (BERT, RoFormer)."""
    return family in ENCODER_FAMILIES


def padding_mask(attention_mask: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Hugging Face's attention_mask `[batch pos]` (1 = token, 0 = padding) as Glassbox's `mask=`:
    bool `[batch 1 pos pos]`, True where a query may attend to a key (and, when causal, only backwards)."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        raise ValueError("attention_mask must be a tensor [batch, pos] of 1 (token) and 0 (padding)")
    b, n = attention_mask.shape
    keys = attention_mask.bool()[:, None, None, :]  # [batch 1 1 k]
    allowed = keys.expand(b, 1, n, n)  # [batch 1 q k]
    if causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool, device=keys.device).tril()  # [batch 1 q k]
    return allowed


def sliding_window_mask(n: int, window: int) -> torch.Tensor:
    """Causal attention within a window, bool `[n n]`: query q sees key k when q - window < k <= q."""
    q = torch.arange(n)[:, None]  # [n 1]
    k = torch.arange(n)[None, :]  # [1 n]
    return (k <= q) & (k > q - window)  # [q k]


def sliding_window_masks(info: ModelFolder, n: int) -> Optional[dict[int, torch.Tensor]]:
    """{layer: sliding_window_mask} for the layers that have a window, or None when an input of n tokens
    fits every window (the default causal mask is then exact). Pass it as `model(tokens, mask=...)`."""
    if info.sliding_window is None or n <= info.sliding_window:
        return None
    mask = sliding_window_mask(n, info.sliding_window)
    return {layer: mask for layer in info.sliding_layers}


def max_model_bytes() -> int:
    """The most bytes of weights Glassbox loads: GLASSBOX_MAX_MODEL_GB, default half the machine's memory."""
    text = os.environ.get("GLASSBOX_MAX_MODEL_GB", "").strip()
    if not text:
        return _machine_memory() // 2
    try:
        gigabytes = float(text)
    except ValueError:
        gigabytes = math.nan
    if not math.isfinite(gigabytes) or gigabytes <= 0:
        raise PretrainedError(f"GLASSBOX_MAX_MODEL_GB={text!r} is not a positive number of gigabytes; "
                              f"unset it (half this machine's memory) or give one, e.g. 8")
    return int(gigabytes * 1e9)


# ---------------------------------------------------------------------------------------------
# 2. Files and config.json


def _default_roots() -> list[Path]:
    roots = []
    models_dir = os.environ.get("GLASSBOX_MODELS_DIR")
    if models_dir:
        roots.append(Path(models_dir).expanduser())
    if os.environ.get("HF_HUB_CACHE"):
        roots.append(Path(os.environ["HF_HUB_CACHE"]).expanduser())
    elif os.environ.get("HF_HOME"):
        roots.append(Path(os.environ["HF_HOME"]).expanduser() / "hub")
    else:
        roots.append(Path.home() / ".cache" / "huggingface" / "hub")
    return roots


def _model_folders(root: Path) -> list[tuple[Path, str]]:
    """(folder, display name) of every model folder in root: its subfolders with a config.json, and
    Hugging Face cache entries models--org--name/snapshots/<revision>/."""
    folders = []
    for entry in _subfolders(root):
        if entry.name.startswith("models--"):
            repo = entry.name[len("models--"):].replace("--", "/")
            revisions = _subfolders(entry / "snapshots")
            for rev in revisions:
                label = repo if len(revisions) == 1 else f"{repo}@{rev.name[:7]}"
                folders.append((rev, label))
        elif (entry / "config.json").exists() or (entry / "config.json").is_symlink():
            folders.append((entry, entry.name))
    return folders


def _subfolders(folder: Path) -> list[Path]:
    """The first MAX_FOLDERS subfolders, by name; none when the folder is missing or unreadable."""
    try:
        return [p for p in sorted(folder.iterdir())[:MAX_FOLDERS] if p.is_dir()]
    except OSError:
        return []


def _regular_file(path: Path, root: Optional[Path]) -> bool:
    """Is `path` a regular file (inside root, when given)? Pipes and devices are not: reading them could
    stall or never end. A link counts as what it points to, and must not lead out of root."""
    try:
        resolved = path.resolve()
        if root is not None and not resolved.is_relative_to(root):
            return False
        return stat.S_ISREG(os.stat(resolved).st_mode)
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop
        return False


def _checked_file(path: Path, root: Optional[Path], max_bytes: int) -> Path:
    """`path` resolved, after checking it is a regular file inside root and at most max_bytes long."""
    if root is not None and path.exists() and not path.resolve().is_relative_to(root):
        raise PretrainedError(f"{path.name} links outside {root}; Glassbox only reads files inside the "
                              f"folders it was pointed to")
    if not _regular_file(path, root):
        raise PretrainedError(f"{path.parent.name} has no readable {path.name}")
    size = path.stat().st_size
    if size > max_bytes:
        raise PretrainedError(f"{path.name} is {size / 1e6:.1f} MB, more than the {max_bytes / 1e6:.0f} MB "
                              f"such a file ever needs; it is not a model file Glassbox can read")
    return path.resolve()


def _read_json(path: Path, root: Optional[Path], max_bytes: int = CONFIG_MAX_BYTES) -> dict:
    """A JSON object from a bounded regular file; anything else is a PretrainedError."""
    checked = _checked_file(path, root, max_bytes)
    try:
        data = json.loads(checked.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: bad JSON, bad UTF-8, a number of 5,000 digits
        raise PretrainedError(f"{path.name} is not valid JSON ({exc}); the download may be incomplete") from exc
    if not isinstance(data, dict):
        raise PretrainedError(f"{path.name} must hold a JSON object, got {type(data).__name__}")
    return data


def _read_config(folder: Path, root: Optional[Path]) -> dict:
    if not folder.is_dir():
        raise PretrainedError(f"{folder} is not a folder; give the folder that holds config.json")
    if not (folder / "config.json").exists():
        raise PretrainedError(f"{folder.name} has no config.json, so its model's sizes are unknown; a Hugging "
                              f"Face model folder has config.json beside its .safetensors weights")
    return _read_json(folder / "config.json", root)


def _architecture(config: dict) -> str:
    """The checkpoint's architecture name, refused unless Glassbox can convert it."""
    names = config.get("architectures")
    arch = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None
    if arch in SUPPORTED:
        return arch
    shown = arch or f"model_type {config.get('model_type')!r}"
    raise PretrainedError(f"Glassbox cannot convert {shown[:80]}; it opens {', '.join(SUPPORTED)}")


def _best_guess_architecture(folder: Path, root: Optional[Path]) -> tuple[str, str]:
    """(architecture, family) for listing a broken folder; empty when even that cannot be read."""
    try:
        arch = _architecture(_read_config(folder, root))
        return arch, SUPPORTED[arch]
    except PretrainedError:
        return "", ""


# ---------------------------------------------------------------------------------------------
# 3. The families: config.json -> TransformerConfig fields, and a recipe for every tensor


@dataclass(frozen=True)
class Recipe:
    """One Glassbox tensor, and where it comes from in the checkpoint."""

    target: str  # our state_dict name, e.g. "stack.blocks.0.attn.W_Q.weight"
    source: str  # the checkpoint's key; body keys are relative to the family's prefix (e.g. "transformer.")
    shape: tuple[int, ...]  # the shape the checkpoint tensor must have
    body: bool = True  # under the body prefix (False: heads such as lm_head.weight)
    part: Optional[tuple[int, int]] = None  # (i, n): the i-th of n equal slices along the last axis
    transpose: bool = False  # Conv1D stores [in out]; nn.Linear wants [out in]

    @property
    def target_shape(self) -> tuple[int, ...]:
        """Our tensor's shape: the slice taken, then turned."""
        shape = list(self.shape)
        if self.part is not None:
            shape[-1] //= self.part[1]
        return tuple(reversed(shape)) if self.transpose else tuple(shape)

    @property
    def numel(self) -> int:
        """How many weights this recipe gives Glassbox."""
        return math.prod(self.shape) // (self.part[1] if self.part else 1)


@dataclass(frozen=True)
class Translation:
    """How one checkpoint maps onto Glassbox: the config fields and every tensor's recipe."""

    family: str
    architecture: str
    fields: dict  # TransformerConfig keyword arguments
    outer: tuple[Recipe, ...]  # embeddings, final norm, heads
    layer: Callable[[int], tuple[Recipe, ...]]  # block i's recipes
    n_layers: int
    body_prefixes: tuple[str, ...]  # tried in order; the first under which `probe` exists wins
    probe: str  # a body key every checkpoint of the family has
    ignored: tuple[str, ...] = ()  # regexes (full keys) of tensors known and not needed
    missing_hints: dict = field(default_factory=dict)  # key prefix -> what it means when it is missing
    notes: tuple[str, ...] = ()
    sliding_window: Optional[int] = None
    sliding_layers: tuple[int, ...] = ()

    def recipes(self) -> list[Recipe]:
        """Every recipe; call only after the bounds (n_layers is capped there)."""
        return [*self.outer, *(r for i in range(self.n_layers) for r in self.layer(i))]

    def parameters(self) -> int:
        """Weights the config implies, by arithmetic: every layer has block 0's shapes."""
        per_layer = sum(r.numel for r in self.layer(0))
        return sum(r.numel for r in self.outer) + self.n_layers * per_layer


# Hugging Face activation names -> Glassbox's (gelu_new and friends are the tanh approximation).
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "relu": "relu", "silu": "silu", "swish": "silu"}


def _translate(config: dict) -> Translation:
    arch = _architecture(config)
    return {"gpt2": _gpt2, "bert": _bert, "roformer": _roformer, "llama": _llama}[SUPPORTED[arch]](config, arch)


def _gpt2(config: dict, arch: str) -> Translation:
    """GPT-2: learned positions, pre-LN, biases everywhere, tied unembedding, Conv1D weights `[in out]`."""
    d = _whole(config, ("n_embd", "hidden_size"), 768)
    heads = _whole(config, ("n_head", "num_attention_heads"), 12)
    d_mlp = _whole(config, ("n_inner",), 4 * d)
    vocab = _whole(config, ("vocab_size",), 50257)
    context = _whole(config, ("n_positions", "n_ctx", "max_position_embeddings"), 1024)
    tied = _flag(config, "tie_word_embeddings", True)
    for name in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
        if _flag(config, name, False):
            raise PretrainedError(f"this GPT-2 sets {name}, a variant Glassbox does not implement")
    _divides(heads, d, "n_head", "n_embd")
    fields = dict(arch="decoder", vocab_size=vocab, d_model=d, n_heads=heads,
                  n_layers=_whole(config, ("n_layer", "num_hidden_layers"), 12),
                  d_mlp=d_mlp, max_len=context, pos="learned", norm="pre",
                  act=_activation(config, "activation_function", "gelu_new"),
                  ln_eps=_positive(config, "layer_norm_epsilon", 1e-5),
                  score="scaled_dot" if _flag(config, "scale_attn_weights", True) else "dot",
                  qkv_bias=True, attn_out_bias=True, mlp_bias=True, tie_embeddings=tied)
    outer = [Recipe("stack.W_E.weight", "wte.weight", (vocab, d)),
             Recipe("stack.W_pos.weight", "wpe.weight", (context, d)),
             Recipe("stack.ln_final.ln.weight", "ln_f.weight", (d,)),
             Recipe("stack.ln_final.ln.bias", "ln_f.bias", (d,))]
    if not tied:
        outer.append(Recipe("unembed.weight", "lm_head.weight", (vocab, d), body=False))

    def layer(i: int) -> tuple[Recipe, ...]:
        ours, theirs = f"stack.blocks.{i}.", f"h.{i}."
        recipes = [Recipe(ours + "ln1.ln.weight", theirs + "ln_1.weight", (d,)),
                   Recipe(ours + "ln1.ln.bias", theirs + "ln_1.bias", (d,))]
        for j, name in enumerate(("W_Q", "W_K", "W_V")):  # c_attn is [d 3d]: q | k | v along the last axis
            recipes += [Recipe(ours + f"attn.{name}.weight", theirs + "attn.c_attn.weight", (d, 3 * d),
                               part=(j, 3), transpose=True),
                        Recipe(ours + f"attn.{name}.bias", theirs + "attn.c_attn.bias", (3 * d,), part=(j, 3))]
        recipes += [Recipe(ours + "attn.W_O.weight", theirs + "attn.c_proj.weight", (d, d), transpose=True),
                    Recipe(ours + "attn.W_O.bias", theirs + "attn.c_proj.bias", (d,)),
                    Recipe(ours + "ln2.ln.weight", theirs + "ln_2.weight", (d,)),
                    Recipe(ours + "ln2.ln.bias", theirs + "ln_2.bias", (d,)),
                    Recipe(ours + "mlp.W_in.weight", theirs + "mlp.c_fc.weight", (d, d_mlp), transpose=True),
                    Recipe(ours + "mlp.W_in.bias", theirs + "mlp.c_fc.bias", (d_mlp,)),
                    Recipe(ours + "mlp.W_out.weight", theirs + "mlp.c_proj.weight", (d_mlp, d), transpose=True),
                    Recipe(ours + "mlp.W_out.bias", theirs + "mlp.c_proj.bias", (d,))]
        return tuple(recipes)

    ignored = [r"(transformer\.)?h\.\d+\.attn\.(masked_)?bias"]  # old files store the causal mask as a buffer
    if tied:
        ignored.append(r"lm_head\.weight")  # a copy of wte.weight
    return Translation("gpt2", arch, fields, tuple(outer), layer, fields["n_layers"], ("transformer.", ""),
                       "wte.weight", tuple(ignored))


def _bert(config: dict, arch: str) -> Translation:
    """BERT: post-LN encoder, learned positions, a LayerNorm on the embeddings, token types, the masked-LM head."""
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise PretrainedError(f"this BERT uses position_embedding_type {config['position_embedding_type']!r}; "
                              f"Glassbox implements BERT's learned absolute positions only")
    return _bert_like(config, arch, "bert", rotary=False)


def _roformer(config: dict, arch: str) -> Translation:
    """RoFormer: BERT's layout with RoPE instead of the position table, rotating (x[2i], x[2i+1]) pairs of each
    query and key at angles pos * 10000^(-2i/d_head) (RoFormerSinusoidalPositionalEmbedding's frequencies)."""
    if _flag(config, "rotary_value", False):
        raise PretrainedError("this RoFormer also rotates its values (rotary_value); Glassbox rotates queries and "
                              "keys only, as RoPE is usually defined")
    d = _whole(config, ("hidden_size",), 768)
    if _whole(config, ("embedding_size",), d) != d:
        raise PretrainedError(f"this RoFormer's embeddings are {config['embedding_size']} wide and projected up "
                              f"to hidden_size {d} (embeddings_project); Glassbox implements embeddings as wide "
                              f"as the residual stream")
    return _bert_like(config, arch, "roformer", rotary=True)


def _bert_like(config: dict, arch: str, family: str, rotary: bool) -> Translation:
    """The tensors BERT and RoFormer share: post-LN blocks with biases, normed embeddings with token types,
    and the masked-LM head (dense, activation, LayerNorm, tied unembedding with its own bias). `rotary`: RoPE
    on pairs instead of BERT's learned position table."""
    name = "BERT" if family == "bert" else "RoFormer"
    d = _whole(config, ("hidden_size",), 768)
    heads = _whole(config, ("num_attention_heads",), 12)
    d_mlp = _whole(config, ("intermediate_size",), 3072)
    vocab = _whole(config, ("vocab_size",), 30522 if family == "bert" else 50000)
    context = _whole(config, ("max_position_embeddings",), 512 if family == "bert" else 1536)
    types = _whole(config, ("type_vocab_size",), 2)
    tied = _flag(config, "tie_word_embeddings", True)
    if _flag(config, "is_decoder", False) or _flag(config, "add_cross_attention", False):
        raise PretrainedError(f"this {name} is configured as a decoder (is_decoder / add_cross_attention); "
                              f"Glassbox opens {name} as the bidirectional encoder it was trained as")
    _divides(heads, d, "num_attention_heads", "hidden_size")
    if rotary and (d // heads) % 2:
        raise PretrainedError(f"RoPE rotates pairs of dimensions, and this {name}'s heads are {d // heads} wide")
    act = _activation(config, "hidden_act", "gelu")
    positions = dict(pos="rope", rope_base=10000.0, rope_layout="pairs") if rotary else dict(pos="learned")
    fields = dict(arch="encoder", vocab_size=vocab, d_model=d, n_heads=heads,
                  n_layers=_whole(config, ("num_hidden_layers",), 12),
                  d_mlp=d_mlp, max_len=context, **positions, norm="post", act=act,
                  ln_eps=_positive(config, "layer_norm_eps", 1e-12), qkv_bias=True, attn_out_bias=True,
                  mlp_bias=True, unembed_bias=True, tie_embeddings=tied, embed_norm=True, n_token_types=types,
                  mlm_head=True)
    head = "cls.predictions."
    outer = [Recipe("stack.W_E.weight", "embeddings.word_embeddings.weight", (vocab, d))]
    if not rotary:
        outer.append(Recipe("stack.W_pos.weight", "embeddings.position_embeddings.weight", (context, d)))
    outer += [Recipe("stack.W_token_type.weight", "embeddings.token_type_embeddings.weight", (types, d)),
              Recipe("stack.ln_embed.ln.weight", "embeddings.LayerNorm.weight", (d,)),
              Recipe("stack.ln_embed.ln.bias", "embeddings.LayerNorm.bias", (d,)),
              Recipe("mlm_dense.weight", head + "transform.dense.weight", (d, d), body=False),
              Recipe("mlm_dense.bias", head + "transform.dense.bias", (d,), body=False),
              Recipe("mlm_norm.ln.weight", head + "transform.LayerNorm.weight", (d,), body=False),
              Recipe("mlm_norm.ln.bias", head + "transform.LayerNorm.bias", (d,), body=False),
              Recipe("unembed.bias", head + "bias", (vocab,), body=False)]
    if not tied:
        outer.append(Recipe("unembed.weight", head + "decoder.weight", (vocab, d), body=False))

    def layer(i: int) -> tuple[Recipe, ...]:
        ours, theirs = f"stack.blocks.{i}.", f"encoder.layer.{i}."
        pairs = [("attn.W_Q", "attention.self.query", (d, d)), ("attn.W_K", "attention.self.key", (d, d)),
                 ("attn.W_V", "attention.self.value", (d, d)), ("attn.W_O", "attention.output.dense", (d, d)),
                 ("ln1.ln", "attention.output.LayerNorm", (d,)), ("mlp.W_in", "intermediate.dense", (d_mlp, d)),
                 ("mlp.W_out", "output.dense", (d, d_mlp)), ("ln2.ln", "output.LayerNorm", (d,))]
        recipes = []
        for mine, hf, shape in pairs:
            recipes += [Recipe(f"{ours}{mine}.weight", f"{theirs}{hf}.weight", shape),
                        Recipe(f"{ours}{mine}.bias", f"{theirs}{hf}.bias", shape[:1])]
        return tuple(recipes)

    prefix = f"({family}\\.)?"
    ignored = [prefix + r"embeddings\.position_ids", prefix + r"embeddings\.token_type_ids", prefix + r"pooler\..*",
               r"cls\.seq_relationship\..*", r"cls\.predictions\.decoder\.bias"]  # decoder.bias IS predictions.bias
    if rotary:
        ignored.append(prefix + r"encoder\.embed_positions\.weight")  # RoFormer's sin/cos table, a fixed formula
    if tied:
        ignored.append(r"cls\.predictions\.decoder\.weight")
    masked_lm = "BertForMaskedLM weights (e.g. bert-base-uncased as published)" if family == "bert" else \
        "RoFormerForMaskedLM weights"
    hints = {head: f"this {name} checkpoint has no masked-LM head (cls.predictions.*): it was saved as {name}Model, "
                   f"which ends in hidden states, not word predictions. Glassbox shows predictions, so it needs "
                   f"{masked_lm}"}
    return Translation(family, arch, fields, tuple(outer), layer, fields["n_layers"], (f"{family}.", ""),
                       "embeddings.word_embeddings.weight", tuple(ignored), hints)


def _llama(config: dict, arch: str) -> Translation:
    """Llama, Mistral, Qwen2: pre-RMSNorm, RoPE on halves, grouped-query attention, SwiGLU MLP."""
    d = _whole(config, ("hidden_size",), 4096)
    heads = _whole(config, ("num_attention_heads",), 32)
    kv_heads = _whole(config, ("num_key_value_heads",), 8 if arch == "MistralForCausalLM" else heads)
    if config.get("head_dim") is None:
        _divides(heads, d, "num_attention_heads", "hidden_size")
    d_head = _whole(config, ("head_dim",), d // heads)
    d_mlp = _whole(config, ("intermediate_size",), 11008)
    vocab = _whole(config, ("vocab_size",), 32000)
    context = _whole(config, ("max_position_embeddings",), 2048)
    tied = _flag(config, "tie_word_embeddings", False)
    _divides(kv_heads, heads, "num_key_value_heads", "num_attention_heads")
    qwen = arch == "Qwen2ForCausalLM"
    attention_bias = _flag(config, "attention_bias", False) and arch == "LlamaForCausalLM"
    qkv_bias = qwen or attention_bias
    mlp_bias = _flag(config, "mlp_bias", False) and arch == "LlamaForCausalLM"
    n_layers = _whole(config, ("num_hidden_layers",), 32)
    fields = dict(arch="decoder", vocab_size=vocab, d_model=d, n_heads=heads, d_head=d_head, n_kv_heads=kv_heads,
                  n_layers=n_layers, d_mlp=d_mlp, max_len=context, pos="rope", rope_base=_rope_base(config),
                  rope_layout="halves", norm="pre", norm_type="rmsnorm",
                  ln_eps=_positive(config, "rms_norm_eps", 1e-6), act=_activation(config, "hidden_act", "silu"),
                  gated_mlp=True, mlp_bias=mlp_bias, qkv_bias=qkv_bias, attn_out_bias=attention_bias,
                  tie_embeddings=tied)
    outer = [Recipe("stack.W_E.weight", "embed_tokens.weight", (vocab, d)),
             Recipe("stack.ln_final.ln.weight", "norm.weight", (d,))]
    if not tied:
        outer.append(Recipe("unembed.weight", "lm_head.weight", (vocab, d), body=False))
    q_width, kv_width = heads * d_head, kv_heads * d_head

    def layer(i: int) -> tuple[Recipe, ...]:
        ours, theirs = f"stack.blocks.{i}.", f"layers.{i}."
        linears = [("attn.W_Q", "self_attn.q_proj", (q_width, d), qkv_bias),
                   ("attn.W_K", "self_attn.k_proj", (kv_width, d), qkv_bias),
                   ("attn.W_V", "self_attn.v_proj", (kv_width, d), qkv_bias),
                   ("attn.W_O", "self_attn.o_proj", (d, q_width), attention_bias),
                   ("mlp.W_gate", "mlp.gate_proj", (d_mlp, d), mlp_bias),
                   ("mlp.W_in", "mlp.up_proj", (d_mlp, d), mlp_bias),
                   ("mlp.W_out", "mlp.down_proj", (d, d_mlp), mlp_bias)]
        recipes = [Recipe(ours + "ln1.ln.weight", theirs + "input_layernorm.weight", (d,)),
                   Recipe(ours + "ln2.ln.weight", theirs + "post_attention_layernorm.weight", (d,))]
        for mine, hf, shape, bias in linears:
            recipes.append(Recipe(f"{ours}{mine}.weight", f"{theirs}{hf}.weight", shape))
            if bias:
                recipes.append(Recipe(f"{ours}{mine}.bias", f"{theirs}{hf}.bias", shape[:1]))
        return tuple(recipes)

    ignored = [r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq"]  # old files kept RoPE's buffer
    if tied:
        ignored.append(r"lm_head\.weight")
    # min(): the layer list is built before the bounds run; a deeper model is refused there, unused
    window, windowed = _sliding_window(config, arch, min(n_layers, MAX_LAYERS))
    notes = () if window is None else (_window_note(arch, window, windowed, len(windowed) == n_layers),)
    return Translation("llama", arch, fields, tuple(outer), layer, n_layers, ("model.",), "embed_tokens.weight",
                       tuple(ignored), notes=notes, sliding_window=window, sliding_layers=windowed)


def _window_note(arch: str, window: int, layers: tuple[int, ...], every_layer: bool) -> str:
    """What a student should know about a sliding window Glassbox does not apply by default."""
    name = arch.removesuffix("ForCausalLM")
    where = "" if every_layer else f" in layers {', '.join(map(str, layers))}"
    return (f"{name} attends within a sliding window of {window:,} tokens{where}; Glassbox attends to every "
            f"earlier token unless you pass mask=sliding_window_masks(info, n), so inputs longer than {window:,} "
            f"tokens differ from the original without it.")


def _rope_base(config: dict) -> float:
    """RoPE's base from rope_parameters (transformers 5) or rope_theta (older files); scaled RoPE is refused."""
    params = config.get("rope_scaling") or config.get("rope_parameters") or {}  # transformers' precedence
    if not isinstance(params, dict):
        raise PretrainedError("config.json's rope_parameters must be a JSON object")
    if params and all(isinstance(v, dict) for v in params.values()):
        raise PretrainedError("this config gives each layer type its own RoPE (nested rope_parameters); "
                              "Glassbox implements one RoPE for every layer")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise PretrainedError(f"this model uses RoPE scaling {kind!r} (rope_parameters / rope_scaling); Glassbox "
                              f"implements the original RoPE ('default') only, so its positions would be wrong")
    base = params.get("rope_theta", config.get("rope_theta", 10000.0))
    if not _finite(base) or base <= 1:
        raise PretrainedError(f"config.json's rope_theta must be a number above 1, got {str(base)[:40]!r}")
    return float(base)


def _sliding_window(config: dict, arch: str, n_layers: int) -> tuple[Optional[int], tuple[int, ...]]:
    """(window, the layers it applies to) as transformers reads them; (None, ()) without a window."""
    if arch == "MistralForCausalLM":
        window = config.get("sliding_window", 4096)
        layers = tuple(range(n_layers))
    elif arch == "Qwen2ForCausalLM" and _flag(config, "use_sliding_window", False):
        window = config.get("sliding_window", 4096)
        types = config.get("layer_types")
        if isinstance(types, list) and len(types) == n_layers:
            layers = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
        else:
            first = _whole(config, ("max_window_layers",), 28)
            layers = tuple(range(min(first, n_layers), n_layers))
    else:
        return None, ()
    if window is None or not layers:
        return None, ()
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise PretrainedError(f"config.json's sliding_window must be a whole number of tokens, got {window!r}")
    return window, layers


def _whole(config: dict, names: tuple[str, ...], default: int) -> int:
    """The first of `names` config.json gives (transformers' default when none), as a positive whole number."""
    value, name = default, names[0]
    for candidate in names:
        if config.get(candidate) is not None:
            value, name = config[candidate], candidate
            break
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PretrainedError(f"config.json's {name} must be a positive whole number, got {str(value)[:40]!r}")
    return value


def _flag(config: dict, name: str, default: bool) -> bool:
    value = config.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PretrainedError(f"config.json's {name} must be true or false, got {str(value)[:40]!r}")
    return value


def _positive(config: dict, name: str, default: float) -> float:
    value = config.get(name, default)
    if not _finite(value) or value <= 0:
        raise PretrainedError(f"config.json's {name} must be a positive number, got {str(value)[:40]!r}")
    return float(value)


def _finite(value) -> bool:
    """A JSON number that is a finite float (a 400-digit integer is not: it overflows a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _activation(config: dict, name: str, default: str) -> str:
    value = config.get(name, default)
    if not isinstance(value, str) or value not in ACTIVATIONS:
        raise PretrainedError(f"config.json's {name} is {str(value)[:40]!r}; Glassbox implements "
                              f"{', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[value]


def _divides(part: int, whole: int, part_name: str, whole_name: str) -> None:
    if whole % part:
        raise PretrainedError(f"config.json's {part_name} ({part}) must divide {whole_name} ({whole})")


# ---------------------------------------------------------------------------------------------
# 4. Bounds from config.json alone


def _check_bounds(t: Translation, element_size: int) -> int:
    """The parameter count the config implies, after refusing anything too big to hold or to loop over."""
    params = t.parameters()
    limit = max_model_bytes()
    needed = params * element_size
    if needed > limit:
        raise PretrainedError(f"config.json describes {_count(params)} parameters, {_gigabytes(needed)} in "
                              f"memory, more than the {limit / 1e9:,.1f} GB Glassbox may use here "
                              f"(GLASSBOX_MAX_MODEL_GB; default half this machine's memory). Choose a smaller "
                              f"model, or raise the limit on a machine that has the memory.")
    if t.n_layers > MAX_LAYERS:
        raise PretrainedError(f"config.json declares {t.n_layers:,} layers; real models have at most a few "
                              f"hundred, and Glassbox opens at most {MAX_LAYERS}")
    if t.fields["max_len"] > MAX_CONTEXT:
        raise PretrainedError(f"config.json declares a context of {t.fields['max_len']:,} positions; Glassbox "
                              f"opens at most {MAX_CONTEXT:,}")
    return params


def _count(n: int) -> str:
    """124M, 7.2B, 1.1e+15: a count a person can read (exact integer arithmetic, any size)."""
    if n >= 10 ** 15:
        return f"{int(str(n)[:2]) / 10:.1f}e+{len(str(n)) - 1}"
    for size, unit in ((10 ** 12, "T"), (10 ** 9, "B"), (10 ** 6, "M"), (10 ** 3, "K")):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def _gigabytes(n_bytes: int) -> str:
    """12.3 GB, or 4.0e+25 bytes for the absurd sizes a hostile config.json declares."""
    return f"{n_bytes / 1e9:,.1f} GB" if n_bytes < 10 ** 18 else f"{_count(n_bytes)} bytes"


def _machine_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 10 ** 9  # a platform without sysconf: assume a small machine


# ---------------------------------------------------------------------------------------------
# 5. The weight files, and their headers against the recipes


@dataclass(frozen=True)
class Stored:
    """One tensor as its safetensors header describes it."""

    file: Path
    shape: tuple[int, ...]
    dtype: str  # safetensors' name: "F32", "F16", "BF16", ...


@dataclass(frozen=True)
class Inspection:
    """Everything learned about a folder before any weight is read."""

    config: dict
    translation: Translation
    cfg: TransformerConfig
    sources: dict[str, tuple[str, Stored]]  # our name -> (checkpoint key, its header)
    recipes: tuple[Recipe, ...]
    parameters: int

    @property
    def stored_dtype(self) -> str:
        kinds = sorted({STORED_DTYPES[stored.dtype] for _, stored in self.sources.values()})
        return "+".join(kinds)


def _inspect(folder: Path, root: Optional[Path], element_size: int = 4) -> Inspection:
    """config.json and the safetensors headers, checked against each other and the bounds; no weights read."""
    config = _read_config(folder, root)
    translation = _translate(config)
    params = _check_bounds(translation, element_size)
    try:
        cfg = TransformerConfig(**translation.fields)
    except (TypeError, ValueError) as exc:
        raise PretrainedError(f"config.json describes a model Glassbox cannot build: {exc}") from exc
    files, index = _weight_files(folder, root)
    stored = _read_headers(files, index)
    recipes = translation.recipes()
    sources = _match(translation, recipes, stored)
    return Inspection(config, translation, cfg, sources, tuple(recipes), params)


def _weight_files(folder: Path, root: Optional[Path]) -> tuple[list[Path], Optional[dict[str, str]]]:
    """The .safetensors files to read, and the index's key -> shard map (None for a single file)."""
    single, index_path = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.exists() or single.is_symlink():
        return [_checked_file(single, root, 1 << 62)], None
    if index_path.exists():
        weight_map = _read_json(index_path, root, 64 << 20).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise PretrainedError("model.safetensors.index.json has no weight_map; the download may be incomplete")
        for shard in weight_map.values():
            if not isinstance(shard, str) or Path(shard).name != shard or not shard.endswith(".safetensors"):
                raise PretrainedError(f"the index names a shard {str(shard)[:60]!r}; shards must be .safetensors "
                                      f"files inside the model folder")
        shards = sorted(set(weight_map.values()))
        for shard in shards:
            if not (folder / shard).exists():
                raise PretrainedError(f"the index names the shard {shard}, which is missing from {folder.name}; "
                                      f"download it again (all {len(shards)} shards are needed)")
        return [_checked_file(folder / s, root, 1 << 62) for s in shards], weight_map
    raise PretrainedError(_no_weights_message(folder))


def _no_weights_message(folder: Path) -> str:
    pickles = [name for name in PICKLE_FILES if (folder / name).exists()] or \
              sorted(p.name for p in folder.glob("*.bin"))[:1]
    if pickles:
        return (f"{folder.name} holds PyTorch pickle weights ({pickles[0]}), which can run code when opened, so "
                f"Glassbox reads only .safetensors. Convert once, in an environment you trust, with transformers: "
                f"AutoModelForCausalLM.from_pretrained(folder).save_pretrained(new_folder) (AutoModelForMaskedLM "
                f"for BERT) writes model.safetensors; or download the model's .safetensors files instead.")
    others = sorted(p.name for p in folder.glob("*.safetensors"))[:3]
    if others:
        return (f"{folder.name} has {', '.join(others)} but no model.safetensors or model.safetensors.index.json, "
                f"the names transformers gives a model's weights")
    return f"{folder.name} has no weights: expected model.safetensors (or model.safetensors.index.json and its shards)"


def _read_headers(files: list[Path], index: Optional[dict[str, str]]) -> dict[str, Stored]:
    """Every tensor's header, across the shards; the index (when there is one) must agree with them."""
    stored: dict[str, Stored] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    if key in stored:
                        raise PretrainedError(f"tensor {key!r} is stored twice ({stored[key].file.name} and "
                                              f"{file.name})")
                    piece = f.get_slice(key)
                    stored[key] = Stored(file, tuple(piece.get_shape()), piece.get_dtype())
        except (SafetensorError, OSError) as exc:
            raise PretrainedError(f"{file.name} is not a readable .safetensors file (truncated or damaged? "
                                  f"download it again): {exc}") from exc
    for key, shard in (index or {}).items():
        if key not in stored or stored[key].file.name != shard:
            raise PretrainedError(f"the index says tensor {key!r} is in {shard}, but it is not there; the index "
                                  f"and its shards do not belong together")
    return stored


def _match(t: Translation, recipes: list[Recipe], stored: dict[str, Stored]) -> dict[str, tuple[str, Stored]]:
    """our name -> (checkpoint key, header) for every recipe, after checking names, shapes and dtypes; a
    tensor in the checkpoint that no recipe uses and no `ignored` pattern knows is refused."""
    prefix = next((p for p in t.body_prefixes if p + t.probe in stored), None)
    if prefix is None:
        raise PretrainedError(f"the weights have no {t.probe} (under {' or '.join(repr(p) for p in t.body_prefixes)});"
                              f" they do not look like a {t.architecture} checkpoint")
    sources, used = {}, set()
    for recipe in recipes:
        key = _lookup(stored, (prefix if recipe.body else "") + recipe.source)
        if key is None:
            raise PretrainedError(_missing_message(t, recipe, prefix))
        header = stored[key]
        if header.shape != recipe.shape:
            raise PretrainedError(f"tensor {key!r} has shape {list(header.shape)}, but config.json implies "
                                  f"{list(recipe.shape)}; the weights and config.json do not belong together")
        if header.dtype not in STORED_DTYPES:
            raise PretrainedError(f"tensor {key!r} is stored as {header.dtype}; Glassbox reads float32, float16 "
                                  f"and bfloat16 weights")
        sources[recipe.target] = (key, header)
        used.add(key)
    unknown = [k for k in stored if k not in used and not any(re.fullmatch(p, k) for p in t.ignored)]
    if unknown:
        raise PretrainedError(f"the checkpoint has {len(unknown)} tensor(s) Glassbox does not know how to use "
                              f"(e.g. {', '.join(unknown[:3])}); it may be a variant of {t.architecture} that "
                              f"Glassbox does not implement")
    return sources


def _lookup(stored: dict[str, Stored], key: str) -> Optional[str]:
    """key, or its old name (LayerNorm.gamma / .beta in early BERT files), whichever the checkpoint has."""
    if key in stored:
        return key
    old = re.sub(r"LayerNorm\.weight$", "LayerNorm.gamma", re.sub(r"LayerNorm\.bias$", "LayerNorm.beta", key))
    return old if old in stored else None


def _missing_message(t: Translation, recipe: Recipe, prefix: str) -> str:
    for start, hint in t.missing_hints.items():
        if recipe.source.startswith(start):
            return hint
    key = (prefix if recipe.body else "") + recipe.source
    return (f"the weights have no tensor {key!r} (Glassbox's {recipe.target}); config.json says there is one, "
            f"so the weights are incomplete or belong to another model")


# ---------------------------------------------------------------------------------------------
# 6. Loading, tensor by tensor, into a skeleton built on the meta device


def _build(found: Inspection, device: torch.device, dtype: torch.dtype) -> Transformer:
    """The model: a skeleton on the meta device, checked against the recipes, then filled weight by weight."""
    cfg = found.cfg
    with torch.device("meta"):
        model = Transformer(cfg)  # shapes only: no memory, no random init
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    tied = sorted(model.shared_keys())  # the tied unembedding: W_E itself, so no recipe of its own
    _check_skeleton(expected, found.recipes, tied)
    tensors = {}
    for recipe in found.recipes:
        key, header = found.sources[recipe.target]
        tensors[recipe.target] = _load_tensor(recipe, key, header, device, dtype)
    for name in tied:
        tensors[name] = tensors["stack.W_E.weight"]
    model.load_state_dict(tensors, strict=True, assign=True)
    if cfg.tie_embeddings:
        model.tie_weights()  # assign=True replaced the shared Parameter with two; make them one again
    model.init_tables()  # the sinusoidal / RoPE tables, on the weights' device
    return model.eval()


def _check_skeleton(expected: dict[str, tuple], recipes: tuple[Recipe, ...], tied: list[str]) -> None:
    """The recipes produce exactly the model's tensors, in its shapes (a loader bug shows here, not later)."""
    produced = {r.target: r.target_shape for r in recipes}
    produced.update({name: produced.get("stack.W_E.weight") for name in tied})
    if produced != expected:
        missing = sorted(set(expected) - set(produced))[:3]
        extra = sorted(set(produced) - set(expected))[:3]
        shapes = [n for n in produced if n in expected and produced[n] != expected[n]][:3]
        raise PretrainedError(f"Glassbox's model and its checkpoint loader disagree (missing {missing}, extra "
                              f"{extra}, shapes {shapes}); please report this as a bug")


def _load_tensor(recipe: Recipe, key: str, header: Stored, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """One weight, read from disk, cut and turned as the recipe says, in float32, checked finite.

    The file is opened for this tensor alone: safetensors maps it into memory, and the pages a read
    touches stay resident until the mapping closes, so one mapping per shard would hold a second copy
    of the model while it loads.
    """
    if recipe.part is None and len(header.shape) == 2 and math.prod(header.shape) * 4 > CHUNK_BYTES:
        weight = _load_in_chunks(recipe, key, header)
    else:
        weight = _load_whole(recipe, key, header)
    if dtype != torch.float32:
        weight = weight.to(dtype)  # converted here, so the device receives only the smaller copy
        if not bool(torch.isfinite(weight).all()):
            raise PretrainedError(f"tensor {key!r} overflows {dtype}; load it in float32 instead")
    return weight.to(device)


CHUNK_BYTES = 16 << 20  # a matrix bigger than this (GPT-2's 154 MB embedding) is read this much at a time


def _not_finite(key: str) -> PretrainedError:
    return PretrainedError(f"tensor {key!r} holds NaN or infinite values; the file is damaged or comes from "
                           f"a run that diverged")


def _load_in_chunks(recipe: Recipe, key: str, header: Stored) -> torch.Tensor:
    """A big matrix read a block of stored rows at a time, each through a mapping of its own that closes
    before the next: the file's pages never stay resident beside the copy (one mapping for the whole matrix
    added its size again to the peak, 1.4x GPT-2 small's weights instead of about 1.05x)."""
    rows, cols = header.shape
    weight = torch.empty((cols, rows) if recipe.transpose else (rows, cols), dtype=torch.float32)
    step = max(1, CHUNK_BYTES // (4 * cols))
    for start in range(0, rows, step):
        with safe_open(str(header.file), framework="pt") as f:
            block = f.get_slice(key)[start:start + step]  # [rows' block, cols], read from the mapping
            target = weight[:, start:start + step] if recipe.transpose else weight[start:start + step]
            target.copy_(block.T if recipe.transpose else block)
        if not bool(torch.isfinite(target).all()):
            raise _not_finite(key)
    return weight


def _load_whole(recipe: Recipe, key: str, header: Stored) -> torch.Tensor:
    """A weight read at once (small ones, and GPT-2's fused q, k, v cut in three), checked finite."""
    with safe_open(str(header.file), framework="pt") as f:
        if recipe.part is None:
            view = f.get_tensor(key)  # a view of the mapped file
        else:
            i, n = recipe.part
            width = header.shape[-1] // n
            cut = (slice(None),) * (len(header.shape) - 1) + (slice(i * width, (i + 1) * width),)
            view = f.get_slice(key)[cut]  # [... width]
        if recipe.transpose:
            view = view.T  # [out in]: nn.Linear's layout
        weight = torch.empty(view.shape, dtype=torch.float32)
        weight.copy_(view)  # our own memory, in float32, contiguous
    if not bool(torch.isfinite(weight).all()):
        raise _not_finite(key)
    return weight


def _load_dtype(dtype) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if dtype not in LOAD_DTYPES:
        raise PretrainedError(f"dtype must be torch.float32, torch.float16 or torch.bfloat16, got {dtype!r}")
    return dtype


# ---------------------------------------------------------------------------------------------
# 7. The tokenizer

SPECIAL_NAMES = ("bos", "eos", "cls", "sep", "mask", "pad", "unk")
# Each family's usual special tokens, used when the folder's tokenizer_config.json does not name them.
FAMILY_SPECIALS = {
    "gpt2": {"bos": "<|endoftext|>", "eos": "<|endoftext|>", "unk": "<|endoftext|>"},
    "bert": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]", "unk": "[UNK]"},
    "llama": {"bos": "<s>", "eos": "</s>", "unk": "<unk>"},
}
FAMILY_SPECIALS["roformer"] = FAMILY_SPECIALS["bert"]  # RoFormer keeps BERT's special tokens
VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}  # whitespace a label shows


class Tokenizer:
    """Text <-> token ids, with Hugging Face's `tokenizers` library doing the work, and a label per token.

    encode(text) adds the family's special tokens as transformers does ([CLS] ... [SEP] for BERT, a BOS
    where the tokenizer asks for one); decode(ids) drops them unless skip_special=False. labels(ids) are
    what a page shows under each token: GPT-2's "Ġ" and Llama's "▁" become "␣", a newline "↵", BERT's
    continuation pieces keep their "##".
    """

    def __init__(self, backend: Backend, special_ids: dict[str, int], style: str):
        self._backend = backend
        self.style = style  # "bytes" (byte-level BPE), "metaspace" (SentencePiece-like), "wordpiece" or "plain"
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self.special_ids = dict(special_ids)  # {"bos": id, ...}, only the ones this tokenizer has
        self.bos_id = special_ids.get("bos")
        self.eos_id = special_ids.get("eos")
        self.cls_id = special_ids.get("cls")
        self.sep_id = special_ids.get("sep")
        self.mask_id = special_ids.get("mask")
        self.pad_id = special_ids.get("pad")
        self.unk_id = special_ids.get("unk")
        added = backend.get_added_tokens_decoder()  # {id: AddedToken}: specials, and words added as they are
        self._special = {i for i, token in added.items() if token.special} | set(special_ids.values())
        self._added = set(added)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}")
        return self._backend.encode(text).ids

    def decode(self, ids, skip_special: bool = True) -> str:
        return self._backend.decode(self._checked(ids), skip_special_tokens=skip_special)

    def labels(self, ids) -> list[str]:
        """One label per token. Byte-level pieces that each hold part of one character (a 4,096-token vocabulary
        splits "é" into two bytes, an emoji into four) are labelled with that character, marked as a part:
        `é…` then `…é`, rather than as raw bytes."""
        ids = self._checked(ids)
        labels = [self._label(i) for i in ids]
        if self.style == "bytes":
            _join_split_characters(labels, [self._bytes_of(i) for i in ids])
        return labels

    def _bytes_of(self, i: int) -> Optional[bytes]:
        """A byte-level piece's bytes; None for a special or added token (never part of a character)."""
        token = self._backend.id_to_token(i)
        if token is None or i in self._special or i in self._added or not all(c in BYTE_OF_CHAR for c in token):
            return None
        return bytes(BYTE_OF_CHAR[c] for c in token)

    def _checked(self, ids) -> list[int]:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, numbers.Integral)
               or not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]!r} is outside this tokenizer's {self.vocab_size} ids")
        return [int(i) for i in ids]

    def _label(self, i: int) -> str:
        token = self._backend.id_to_token(i)
        if token is None:
            return f"<{i}>"
        if i in self._special:
            return token
        if i in self._added:  # added words are stored as plain text, whatever the style
            return _visible(token)
        if self.style == "bytes":
            return _visible(_byte_level_text(token))
        if self.style == "metaspace":
            return _visible(_metaspace_text(token))
        return _visible(token)


def _join_split_characters(labels: list[str], pieces: list[Optional[bytes]]) -> None:
    """Relabel, in place, each run of pieces whose bytes only decode together: every piece of the run shows the
    characters it has a part of, `…` marking a character that goes on in the next piece or began in the last."""
    start = 0
    while start < len(pieces):
        if pieces[start] is None or _decodes(pieces[start]):
            start += 1
            continue
        end = start + 1  # grow the run until its bytes decode (a character is at most 4 bytes: 4 pieces)
        while end < len(pieces) and end - start < 4 and pieces[end] is not None \
                and not _decodes(b"".join(pieces[start:end])):
            end += 1
        run = pieces[start:end]
        if not _decodes(b"".join(run)):
            start += 1  # stray bytes: keep the \xNN labels
            continue
        offsets, at = [], 0
        for piece in run:
            offsets.append((at, at + len(piece)))
            at += len(piece)
        chars, at = [], 0  # (first byte, last byte + 1, character) of the run's text
        for ch in b"".join(run).decode("utf-8"):
            size = len(ch.encode("utf-8"))
            chars.append((at, at + size, ch))
            at += size
        for k, (lo, hi) in enumerate(offsets):
            text = ""
            for c_lo, c_hi, ch in chars:
                if c_lo < hi and lo < c_hi:
                    text += _part_label(ch, max(lo, c_lo) - c_lo, min(hi, c_hi) - c_lo, c_hi - c_lo)
            labels[start + k] = text
        start = end


SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def _part_label(ch: str, lo: int, hi: int, size: int) -> str:
    """Bytes lo..hi-1 of a character of `size` bytes: `é…` (its start), `…é` (its end), `…🙂₃…` (its third byte
    alone), `🙂₁₂…` (its first two). The byte numbers appear wherever a piece's place would be ambiguous, so a
    label names exactly one piece."""
    if lo == 0 and hi == size:
        return _visible(ch)
    numbers = "".join(str(b + 1) for b in range(lo, hi)).translate(SUBSCRIPT)
    ambiguous = hi - lo > 1 or (lo > 0 and hi < size)
    return ("…" if lo > 0 else "") + _visible(ch) + (numbers if ambiguous else "") + ("…" if hi < size else "")


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _byte_level_text(token: str) -> str:
    """A byte-level BPE token's text: each character stands for one byte ("Ġ" a space, "Ċ" a newline).
    A token holding part of a multi-byte character shows those bytes as \\xNN."""
    if not all(c in BYTE_OF_CHAR for c in token):
        return token
    return bytes(BYTE_OF_CHAR[c] for c in token).decode("utf-8", errors="backslashreplace")


def _metaspace_text(token: str) -> str:
    """A SentencePiece-style token's text: "▁" is a space, "<0x0A>" one raw byte (byte fallback)."""
    byte = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", token)
    if byte is None:
        return token.replace("▁", " ")
    value = int(byte.group(1), 16)
    return chr(value) if value < 128 else f"\\x{value:02x}"


def _visible(text: str) -> str:
    """Whitespace as a visible mark (␣ ↵ ⇥), other control characters as \\xNN; never an empty label."""
    return "".join(VISIBLE.get(c, c if c.isprintable() else f"\\x{ord(c):02x}") for c in text) or "∅"


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (byte-level BPE spells every byte as one character)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


BYTE_OF_CHAR = {c: b for b, c in _bytes_to_unicode().items()}


def load_tokenizer(folder: PathLike, family: str, config: Optional[dict] = None) -> Tokenizer:
    """The folder's tokenizer: tokenizer.json, else vocab.json + merges.txt (GPT-2), else vocab.txt (BERT)."""
    folder = Path(folder)
    settings = _tokenizer_settings(folder)
    kind, files = _tokenizer_files(folder, None)
    try:
        if kind == "tokenizer.json":
            backend = Backend.from_file(str(files[0]))
        elif kind == "bpe":
            backend = _byte_level_bpe(*files, settings)
        else:
            backend = _wordpiece(files[0], settings)
    except Exception as exc:  # noqa: BLE001 - the tokenizers library raises plain Exceptions for bad files
        raise PretrainedError(f"the tokenizer files of {folder.name} could not be read ({str(exc)[:200]})") from exc
    backend.no_truncation()  # some tokenizer.json files carry a length limit or padding; transformers ignores
    backend.no_padding()     # them unless asked, and so does Glassbox (the model's context is its own check)
    specials = _special_ids(backend, settings, family, config or {})
    return Tokenizer(backend, specials, _label_style(backend))


def _tokenizer_files(folder: Path, root: Optional[Path]) -> tuple[str, list[Path]]:
    """("tokenizer.json" | "bpe" | "wordpiece", the files), checked to be regular, bounded files."""
    def have(name: str) -> bool:
        return (folder / name).exists() or (folder / name).is_symlink()

    if have("tokenizer.json"):
        return "tokenizer.json", [_checked_file(folder / "tokenizer.json", root, TOKENIZER_MAX_BYTES)]
    if have("vocab.json") and have("merges.txt"):
        return "bpe", [_checked_file(folder / n, root, TOKENIZER_MAX_BYTES) for n in ("vocab.json", "merges.txt")]
    if have("vocab.txt"):
        return "wordpiece", [_checked_file(folder / "vocab.txt", root, TOKENIZER_MAX_BYTES)]
    extra = " It has tokenizer.model (SentencePiece): load it once with transformers' AutoTokenizer and " \
            "save_pretrained, which writes tokenizer.json." if have("tokenizer.model") else ""
    raise PretrainedError(f"{folder.name} has no tokenizer files (tokenizer.json, vocab.json + merges.txt, or "
                          f"vocab.txt), so text cannot be turned into tokens.{extra}")


def _tokenizer_settings(folder: Path) -> dict:
    """tokenizer_config.json over special_tokens_map.json (both optional): casing, special token names."""
    settings = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        if (folder / name).exists():
            settings.update(_read_json(folder / name, None, TOKENIZER_MAX_BYTES))
    return settings


def _token_text(value) -> Optional[str]:
    """A special token as tokenizer_config.json writes it: "<s>" or {"content": "<s>", ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _byte_level_bpe(vocab: Path, merges: Path, settings: dict) -> Backend:
    """GPT-2's tokenizer from vocab.json + merges.txt, built as transformers' GPT2Tokenizer builds it."""
    backend = Backend(models.BPE.from_file(str(vocab), str(merges), continuing_subword_prefix="",
                                           end_of_word_suffix="", fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(settings.get("add_prefix_space", False)))
    backend.decoder = decoders.ByteLevel()
    _add_specials(backend, settings, "gpt2")
    bos = _token_text(settings.get("bos_token")) or "<|endoftext|>"
    if settings.get("add_bos_token") and backend.token_to_id(bos) is not None:
        backend.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                               special_tokens=[(bos, backend.token_to_id(bos))])
    return backend


def _wordpiece(vocab: Path, settings: dict) -> Backend:
    """BERT's tokenizer from vocab.txt, built as transformers' BertTokenizer builds it ([CLS] text [SEP])."""
    names = {n: _token_text(settings.get(f"{n}_token")) or FAMILY_SPECIALS["bert"][n]
             for n in ("cls", "sep", "unk", "pad", "mask")}
    backend = Backend(models.WordPiece.from_file(str(vocab), unk_token=names["unk"]))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=bool(settings.get("tokenize_chinese_chars", True)),
        strip_accents=settings.get("strip_accents"), lowercase=bool(settings.get("do_lower_case", True)))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    _add_specials(backend, settings, "bert")
    cls, sep = backend.token_to_id(names["cls"]), backend.token_to_id(names["sep"])
    if cls is not None and sep is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{names['cls']}:0 $A:0 {names['sep']}:0",
            pair=f"{names['cls']}:0 $A:0 {names['sep']}:0 $B:1 {names['sep']}:1",
            special_tokens=[(names["cls"], cls), (names["sep"], sep)])
    return backend


def _add_specials(backend: Backend, settings: dict, family: str) -> None:
    """Mark the special tokens the vocabulary holds as special (kept whole, dropped by decode)."""
    texts = {_token_text(settings.get(f"{n}_token")) or FAMILY_SPECIALS.get(family, {}).get(n) for n in SPECIAL_NAMES}
    present = sorted(t for t in texts if t and backend.token_to_id(t) is not None)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in present])


def _special_ids(backend: Backend, settings: dict, family: str, config: dict) -> dict[str, int]:
    """{name: id} of the special tokens the tokenizer has: named in tokenizer_config.json, else the family's
    usual ones, else (bos / eos / pad) config.json's ids."""
    vocab = backend.get_vocab_size(with_added_tokens=True)
    found = {}
    for name in SPECIAL_NAMES:
        text = _token_text(settings.get(f"{name}_token")) or FAMILY_SPECIALS.get(family, {}).get(name)
        token_id = backend.token_to_id(text) if text else None
        fallback = config.get(f"{name}_token_id")
        if token_id is None and isinstance(fallback, int) and not isinstance(fallback, bool) and 0 <= fallback < vocab:
            token_id = fallback
        if token_id is not None:
            found[name] = token_id
    return found


def _label_style(backend: Backend) -> str:
    """How token strings spell text, read from the tokenizer's decoder (and model, when it has none)."""
    spec = json.loads(backend.to_str())
    decoder = json.dumps(spec.get("decoder"), ensure_ascii=False)
    if '"ByteLevel"' in decoder:
        return "bytes"
    if '"Metaspace"' in decoder or "▁" in decoder or '"ByteFallback"' in decoder:
        return "metaspace"
    if '"WordPiece"' in decoder or (spec.get("model") or {}).get("type") == "WordPiece":
        return "wordpiece"
    return "bytes" if '"ByteLevel"' in json.dumps(spec.get("pre_tokenizer")) else "plain"
