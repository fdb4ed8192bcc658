"""LoRA adapters on the query side: wrap, save atomically (hash-seed independent), load."""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from pathlib import Path

from .config import FinetuneConfig

log = logging.getLogger(__name__)


def add_lora(encoder, cfg: FinetuneConfig) -> list[str]:
    """Wrap the encoder's transformer with LoRA adapters (peft); freeze everything else.

    Returns the adapted module names. Raises ``ValueError`` when the architecture has no
    ``target_modules`` entry or a name matches nothing.
    """
    from peft import LoraConfig, get_peft_model

    sentence_model = encoder.model
    auto = sentence_model[0].auto_model
    mtype = auto.config.model_type
    if mtype not in cfg.target_modules:
        raise ValueError(
            f"finetune.target_modules has no entry for model_type {mtype!r}; add its attention projections"
        )
    targets = list(cfg.target_modules[mtype])
    lcfg = LoraConfig(
        r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=targets, bias="none"
    )
    sentence_model[0].auto_model = get_peft_model(auto, lcfg)
    for name, p in sentence_model.named_parameters():
        p.requires_grad = "lora_" in name
    wrapped = sorted({n.rsplit(".lora_", 1)[0] for n, _ in sentence_model.named_parameters() if "lora_" in n})
    if not wrapped:
        raise ValueError(f"LoRA target modules {targets} matched nothing in {mtype}")
    return wrapped


def load_adapter(encoder, folder: str | Path) -> None:
    """Put the LoRA adapter saved in ``folder`` (``save_adapter``) on ``encoder``'s transformer
    (a ``capgap.encoders.Encoder``, in place, eval mode, nothing trainable): its query vectors
    are then those of the fine-tuned encoder that saved it. Raises ``FileNotFoundError`` when
    ``folder`` holds no ``adapter_config.json``."""
    from peft import PeftModel

    folder = Path(folder)
    if not (folder / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{folder}: no adapter_config.json (not a saved LoRA adapter)")
    sentence_model = encoder.model
    sentence_model[0].auto_model = PeftModel.from_pretrained(
        sentence_model[0].auto_model, str(folder), is_trainable=False
    )
    sentence_model.eval()


def _sort_key(x):
    """Numbers numerically, then everything else by its canonical JSON text."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return (0, x, "")
    return (1, 0, json.dumps(x, sort_keys=True))


def _sorted_like(saved, live):
    """``saved`` (a value read back from the JSON) with every list that was a set or frozenset
    in ``live`` (the in-memory config value) sorted; other lists keep their order."""
    if isinstance(live, (set, frozenset)) and isinstance(saved, list):
        return sorted(saved, key=_sort_key)
    if isinstance(live, dict) and isinstance(saved, dict):
        return {k: _sorted_like(v, live.get(k)) for k, v in saved.items()}
    if isinstance(live, (list, tuple)) and isinstance(saved, list) and len(live) == len(saved):
        return [_sorted_like(v, lv) for v, lv in zip(saved, live)]
    return saved


def _peft_model(model):
    """The peft model inside ``model``: itself, a SentenceTransformer's first module's
    ``auto_model``, or a ``capgap.encoders.Encoder``'s."""
    inner = getattr(model, "model", None)
    if inner is not None and not hasattr(model, "peft_config") and hasattr(inner, "__getitem__"):  # an Encoder
        model = inner
    if not hasattr(model, "peft_config") and hasattr(model, "__getitem__"):  # a SentenceTransformer
        model = getattr(model[0], "auto_model", model)
    if not hasattr(model, "peft_config") or not hasattr(model, "save_pretrained"):
        raise TypeError(f"save_adapter: {type(model).__name__} holds no peft adapter (no peft_config)")
    return model


def _sibling(path: Path, kind: str) -> Path:
    """A fresh hidden name beside ``path``: ``.<name>.<pid>.<random>.<kind>``."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.{kind}")


def save_adapter(model, out_dir: str | Path) -> Path:
    """Save the LoRA adapter of ``model`` to the folder ``out_dir``, atomically and byte-stable.

    ``model``: a peft ``PeftModel`` (``encoder.model[0].auto_model`` after ``add_lora``), or the
    ``SentenceTransformer`` / ``capgap.encoders.Encoder`` holding it. Writes what peft's
    ``save_pretrained`` writes (``adapter_config.json``, ``adapter_model.safetensors``,
    ``README.md``; one sub-folder per non-default adapter) into a temporary sibling folder
    ``.<name>.*`` next to ``out_dir``, then renames it over ``out_dir`` (a previous ``out_dir`` is
    moved aside first and deleted after): a reader sees the old adapter or the new one, never
    a half-written folder, and a failed save leaves ``out_dir`` as it was and no temporary
    folder behind.

    Every ``adapter_config.json`` is rewritten with the lists that peft holds as sets
    (``target_modules``, ``exclude_modules``, ... whichever fields are sets in memory, nested
    ones included) sorted, and keys sorted (``indent=2``, trailing newline), so the file is
    byte-identical whatever ``PYTHONHASHSEED`` (peft writes ``list(set)``, whose order follows
    the string hash). Returns ``Path(out_dir)``. Raises ``TypeError`` when ``model`` holds no
    peft adapter; errors from ``save_pretrained`` and the file system propagate.
    """
    peft_model = _peft_model(model)
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(out, "tmp")
    tmp.mkdir()  # not mkdtemp: the adapter folder keeps the umask's permissions, as peft's own
    old = None
    try:
        peft_model.save_pretrained(str(tmp))
        for name, config in peft_model.peft_config.items():
            path = (tmp if name == "default" else tmp / name) / "adapter_config.json"
            if not path.is_file():
                continue
            saved = json.loads(path.read_text(encoding="utf-8"))
            live = {k: getattr(config, k) for k in saved if hasattr(config, k)}
            stable = _sorted_like(saved, live)
            path.write_text(json.dumps(stable, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if out.exists() or out.is_symlink():
            old = _sibling(out, "old")
            old.mkdir()
            os.replace(out, old / "adapter")
            try:
                os.replace(tmp, out)
            except BaseException:
                os.replace(old / "adapter", out)  # put the previous adapter back
                raise
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return out
