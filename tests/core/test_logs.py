"""Known-harmless library messages leave the job logs; genuine warnings stay."""

import logging
import os
import subprocess
import sys

import pytest

from capgap.logs import FAISS_LOGGER, TRANSFORMERS_LOGGER, quiet_known_noise


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def capture():
    """A handler on each filtered logger itself (its filters run before its handlers), with the
    loggers at DEBUG; restored afterwards."""
    names = (FAISS_LOGGER, TRANSFORMERS_LOGGER)
    loggers = [logging.getLogger(n) for n in names]
    saved = [(lg.level, list(lg.filters)) for lg in loggers]
    handler = _Capture()
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    quiet_known_noise()
    yield handler
    for lg, (level, filters) in zip(loggers, saved):
        lg.removeHandler(handler)
        lg.setLevel(level)
        lg.filters[:] = filters


# verbatim from faiss-cpu 1.15.1's faiss/loader.py
FAISS_NOISE = [
    (
        logging.DEBUG,
        "Environment variable FAISS_OPT_LEVEL is not set, so let's pick the instruction set according to the current CPU",
    ),
    (logging.INFO, "Loading faiss with AVX512-SPR support."),
    (
        logging.INFO,
        "Could not load library with AVX512-SPR support due to:\nModuleNotFoundError(\"No module named 'faiss.swigfaiss_avx512_spr'\")",
    ),
    (logging.INFO, "Loading faiss with AVX512 support."),
    (
        logging.INFO,
        "Could not load library with AVX512 support due to:\nModuleNotFoundError(\"No module named 'faiss.swigfaiss_avx512'\")",
    ),
    (logging.INFO, "Loading faiss with AVX2 support."),
    (
        logging.INFO,
        "Could not load library with AVX2 support due to:\nModuleNotFoundError(\"No module named 'faiss.swigfaiss_avx2'\")",
    ),
    (logging.INFO, "Loading faiss."),
]


def test_faiss_loader_noise_dropped_real_messages_kept(capture):
    log = logging.getLogger(FAISS_LOGGER)
    for level, msg in FAISS_NOISE:
        log.log(level, msg)
    assert capture.messages == []
    kept = [
        (logging.INFO, "Successfully loaded faiss with AVX2 support."),  # which build runs: one line
        (
            logging.INFO,
            "Could not load library with AVX2 support due to:\nImportError('undefined symbol: _ZN5faiss')",
        ),  # broken install
        (
            logging.WARNING,
            'Could not load library with AVX2 support due to:\nModuleNotFoundError("x")',
        ),  # WARNING: never hidden
        (logging.ERROR, "No module named 'faiss.swigfaiss' found. To fix this, you must do both of the following:"),
    ]
    for level, msg in kept:
        log.log(level, msg)
    assert capture.messages == [m for _, m in kept]


def _report(unexpected=(), missing=(), mismatched=()):
    """A load report exactly as transformers formats it (utils.loading_report)."""
    tl = pytest.importorskip("transformers.utils.loading_report")
    info = tl.LoadStateDictInfo(
        missing_keys=set(missing),
        unexpected_keys=set(unexpected),
        mismatched_keys=set(mismatched),
        error_msgs=[],
        conversion_errors={},
    )
    tl.log_state_dict_report(
        _Named(),
        "/models/minilm",
        ignore_mismatched_sizes=True,
        loading_info=info,
        logger=logging.getLogger(TRANSFORMERS_LOGGER),
    )


class _Named:
    pass


def test_transformers_position_ids_report_dropped_real_warnings_kept(capture):
    _report(unexpected=["embeddings.position_ids"])
    _report(unexpected=["bert.embeddings.position_ids"])
    log = logging.getLogger(TRANSFORMERS_LOGGER)
    log.warning(
        "Some weights of the model checkpoint at /m were not used when initializing BertModel: "
        "['embeddings.position_ids']\n- This IS expected if you are initializing BertModel from ..."
    )  # transformers 4
    assert capture.messages == []
    _report(unexpected=["embeddings.position_ids"], missing=["pooler.dense.weight"])  # MISSING: a real problem
    _report(unexpected=["embeddings.position_ids", "classifier.weight"])  # another unexpected key
    _report(mismatched=[("embeddings.word_embeddings.weight", (10, 4), (12, 4))])
    log.warning(
        "Some weights of the model checkpoint at /m were not used when initializing BertModel: "
        "['embeddings.position_ids', 'cls.predictions.bias']"
    )
    log.warning("A genuine transformers warning about embeddings.position_ids")
    assert len(capture.messages) == 5
    assert "pooler.dense.weight" in capture.messages[0] and "MISSING" in capture.messages[0]
    assert "classifier.weight" in capture.messages[1]
    assert "MISMATCH" in capture.messages[2]
    assert capture.messages[4] == "A genuine transformers warning about embeddings.position_ids"


def test_idempotent():
    from capgap.logs import _FILTERS

    quiet_known_noise()
    assert quiet_known_noise() == [FAISS_LOGGER, TRANSFORMERS_LOGGER]
    for name, cls in _FILTERS.items():
        assert sum(isinstance(f, cls) for f in logging.getLogger(name).filters) == 1


# a job as the workflow runs it: logs.log_to, then faiss and the bundled MiniLM
_JOB = """
import logging, sys
if sys.argv[2] == "quiet":  # what every Snakemake job does first (log_to calls quiet_known_noise)
    from capgap.logs import log_to
    log_to(sys.argv[1])
else:  # the same log file and format, without the filters
    sys.stderr = open(sys.argv[1], "w", buffering=1)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
import faiss
from capgap.encoders import EncoderSpec, load_encoder
load_encoder(EncoderSpec("minilm", "sentence-transformers/all-MiniLM-L6-v2"), device="cpu", threads=1)
logging.getLogger("transformers.modeling_utils").warning("genuine transformers warning")
logging.getLogger("faiss.loader").warning("genuine faiss warning")
"""


def test_job_log_without_the_noise(tmp_path):
    """The real libraries, in a fresh process each: a plain log carries the noise (so this test
    sees it when it is there), a job's log (``logs.log_to``) does not, and keeps the genuine
    warnings and faiss's one-line success message."""
    import transformers

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    logs = {}
    for mode in ("plain", "quiet"):
        path = tmp_path / f"{mode}.log"
        subprocess.run([sys.executable, "-c", _JOB, str(path), mode], env=env, check=True, timeout=300)
        logs[mode] = path.read_text()
    plain, quiet = logs["plain"], logs["quiet"]
    assert "faiss.loader: Loading faiss" in plain
    if int(transformers.__version__.split(".")[0]) >= 5:
        assert "LOAD REPORT" in plain and "embeddings.position_ids" in plain
    for noise in (
        "Loading faiss",
        "Could not load library",
        "FAISS_OPT_LEVEL",
        "LOAD REPORT",
        "UNEXPECTED",
        "position_ids",
        "were not used",
    ):
        assert noise not in quiet, noise
    assert "Successfully loaded faiss" in quiet
    assert "genuine transformers warning" in quiet and "genuine faiss warning" in quiet
    assert "Load pretrained SentenceTransformer" in quiet  # ordinary INFO still there
