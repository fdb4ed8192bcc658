"""One default per key: the config schema is the only place a setting's default is written.

Every settings dataclass and every function that takes a config key as a keyword argument
must default to the schema's value, and must know every key the schema lets a user set
(besides the DAG's own switches). A default changed in one place only fails here.
"""

import inspect

import pytest
import yaml

from capgap.config import SCHEMA_PATH, field_defaults, item_defaults, schema, section_defaults

# keys the workflow consumes itself (switches, per-dataset / per-encoder overrides)
DAG_ONLY = {
    "probe": {"enabled", "shards"},
    "finetune": {"enabled", "steps_by_encoder"},
    "colbert": {"enabled", "datasets", "steps_by_dataset"},
    "ladder": {"enabled", "regimes", "regime_datasets"},
}


def _props(section):
    return schema()["properties"][section]["properties"]


def _dataclasses():
    from capgap.colbert import ColbertConfig
    from capgap.finetune import FinetuneConfig
    from capgap.ladder import LadderConfig
    from capgap.probe import ProbeConfig

    return {"probe": ProbeConfig, "finetune": FinetuneConfig, "colbert": ColbertConfig, "ladder": LadderConfig}


@pytest.mark.parametrize("section", ["probe", "finetune", "colbert", "ladder"])
def test_settings_dataclass_defaults_are_the_schema_defaults(section):
    cls = _dataclasses()[section]
    props = _props(section)
    assert set(cls.__dataclass_fields__) == set(props) - DAG_ONLY[section], (
        "a key the schema has and the dataclass lacks, or the reverse"
    )
    # every field has a schema default, and they are equal (the raw YAML, not the module's cache)
    raw = yaml.safe_load(SCHEMA_PATH.read_text())["properties"][section]["properties"]
    want = {k: raw[k]["default"] for k in cls.__dataclass_fields__}
    assert field_defaults(cls) == want


def test_probe_function_defaults_are_the_probe_config():
    from capgap.probe import ProbeConfig, probe

    sig = inspect.signature(probe).parameters
    for key, value in field_defaults(ProbeConfig).items():
        assert sig[key].default == value, key
    assert ProbeConfig().kwargs() == {k: v for k, v in section_defaults("probe").items() if k not in DAG_ONLY["probe"]}


def test_probe_config_rejects_unknown_keys_and_ignores_enabled():
    from capgap.probe import ProbeConfig

    assert ProbeConfig.from_config({"enabled": False, "C": 5.0}) == ProbeConfig(C=5.0)
    assert ProbeConfig.from_config({"shards": 4, "C": 5.0}) == ProbeConfig(C=5.0)  # how the DAG runs it, not a setting
    with pytest.raises(ValueError, match="C_maxx"):
        ProbeConfig.from_config({"C_maxx": 1.0})


def test_bm25_defaults_are_the_schema_defaults():
    from capgap.bm25 import BM25

    sig = inspect.signature(BM25.__init__).parameters
    want = {k: v for k, v in section_defaults("bm25").items() if k != "enabled"}
    assert {k: sig[k].default for k in want} == want
    assert set(want) == set(sig) - {"self", "doc_texts"}


def test_encoder_spec_defaults_are_the_schema_defaults():
    from capgap.encoders import EncoderSpec

    want = item_defaults("encoders")
    got = field_defaults(EncoderSpec)
    assert {k: got[k] for k in want} == want
    assert set(EncoderSpec.__dataclass_fields__) - {"name"} == set(
        schema()["properties"]["encoders"]["additionalProperties"]["properties"]
    )
    assert got["dtype"] is None  # the only key without a schema default: unset means float32


def test_split_and_eval_defaults_are_the_schema_defaults():
    from capgap import data, evaluate, report

    split = item_defaults("datasets", "split")
    sig = inspect.signature(data.split_queries).parameters
    assert (sig["heldout_fraction"].default, sig["seed"].default) == (split["heldout_fraction"], split["seed"])
    ndcg_k = section_defaults("eval")["ndcg_k"]
    for fn in (evaluate.rows_from_ranks, report.render_markdown, report.summary, report.build_report):
        assert inspect.signature(fn).parameters["ndcg_k"].default == ndcg_k, fn.__name__


def test_hardness_takes_missing_keys_from_the_schema():
    """run_grid fills what a section leaves out from the schema, as Snakemake's validate does."""
    from capgap.hardness import run_grid

    d = section_defaults("hardness")
    cfg = {
        **{k: d[k] for k in ("rho", "steps", "lr", "temperature", "width_factor")},
        "P": [4],
        "m_train": 4,
        "m_heldout": 4,
        "archs": ["perfect"],
        "losses": ["regression"],
        "chance_pairs": 0,
        "chance_queries": 8,
        "steps": 1,
    }
    rows, summary = run_grid(cfg)  # no seed, no d_rule: the schema's (seed 0, d = ceil(log2 4) + 1 = 3)
    assert summary["sizes"][0]["d"] == 3
    assert run_grid({**cfg, "seed": d["seed"], "d_rule": d["d_rule"]}) == (rows, summary)


def test_section_defaults_in_the_schema_hold_no_values():
    """A section's own ``default`` may only switch it off: its keys' defaults live on the keys,
    so they are written once."""
    for name, node in schema()["properties"].items():
        if isinstance(node.get("default"), dict):
            assert set(node["default"]) <= {"enabled"}, name


def test_hardness_train_encoder_defaults_are_the_schema_defaults():
    from capgap.hardness import train_encoder

    sig = inspect.signature(train_encoder).parameters
    d = section_defaults("hardness")
    assert {k: sig[k].default for k in ("steps", "lr", "temperature", "width_factor", "seed")} == {
        k: d[k] for k in ("steps", "lr", "temperature", "width_factor", "seed")
    }


def test_helper_function_defaults_are_the_schema_defaults():
    """Lower-level functions whose keyword arguments are config keys default to the schema."""
    from capgap import bm25, compress, finetune, generate, hardness, ladder
    from capgap.colbert import FaissTokenIndex, PlaidIndex, encode_documents

    b, c, f, h, cb, la = (
        section_defaults(s) for s in ("bm25", "compress", "finetune", "hardness", "colbert", "ladder")
    )
    want = [
        (bm25.tokenize, {"stopwords": b["stopwords"]}),
        (bm25.variant_name, {k: b[k] for k in ("backend", "method", "k1", "b", "epsilon", "stopwords")}),
        (compress.compress, {"seed": c["seed"]}),
        (compress.evaluate_variants, {"seed": c["seed"]}),
        (finetune.infonce_loss, {"form": f["loss"]}),
        (finetune.candidate_masks, {"candidates": f["candidates"], "n_negatives": f["n_negatives"]}),
        (finetune.validation_split, {"seed": f["validation_seed"]}),
        (ladder.make_head, {"width_factor": la["width_factor"]}),
        (hardness.dimension, {"a": h["d_rule"]["a"], "b": h["d_rule"]["b"]}),
        (hardness.make_task, {"seed": h["seed"]}),
        (hardness.sample_queries, {"seed": h["seed"]}),
        (hardness.split_parity_queries, {"seed": h["seed"]}),
        (generate.expand_limit, {"seed": item_defaults("datasets", "expand")["seed"]}),
        (
            FaissTokenIndex.__init__,
            {
                "nlist": cb["faiss_nlist"],
                "nprobe": cb["faiss_nprobe"],
                "k_tokens": cb["faiss_k_tokens"],
                "seed": cb["seed"],
            },
        ),
        (
            PlaidIndex.__init__,
            {
                "nbits": cb["plaid_nbits"],
                "candidates": cb["candidates"],
                "ncells": cb["plaid_ncells"],
                "ndocs": cb["plaid_ndocs"],
                "centroid_score_threshold": cb["plaid_centroid_score_threshold"],
            },
        ),
        (encode_documents, {"batch_size": cb["encode_batch_size"]}),
    ]
    raw = yaml.safe_load(SCHEMA_PATH.read_text())["properties"]
    assert raw["bm25"]["properties"]["stopwords"]["default"] == b["stopwords"]  # the cache is the file
    for fn, defaults in want:
        sig = inspect.signature(fn).parameters
        assert {k: sig[k].default for k in defaults} == defaults, fn.__qualname__


def test_regime_names_that_would_collide_or_not_round_trip_are_refused():
    """A regime named no-twins would write the twin-negatives learner's rows (finetuned-no-twins);
    '@' would read as a transfer row, a space would not survive a path: the schema refuses them
    (Snakemake's validate uses jsonschema, as here); hyphenated names are fine."""
    import jsonschema

    from capgap.config import schema

    regimes = schema()["properties"]["ladder"]["properties"]["regimes"]
    jsonschema.validate({"early-stop": {}, "r4": {}, "lr_1e.4": {}}, regimes)
    for bad in ("no-twins", "No-Twins", "a@b", "two words", 0.1, 1, True, None):  # YAML reads 0.1: or 1: as numbers
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({bad: {}}, regimes)


def test_enabled_is_the_dags_one_switch():
    """capgap.config.enabled (common.smk's ``enabled``): a section's switch, its dataset list,
    twin_negatives' dependence on finetune and twins, the ladder's regimes and their datasets."""
    from capgap.config import enabled

    cfg = {
        "bm25": {"enabled": True},
        "finetune": {"enabled": True},
        "compress": {"enabled": True, "datasets": ["a"]},
        "colbert": {"enabled": False, "datasets": None},
        "twin_negatives": {"enabled": True, "datasets": None},
        "ladder": {"enabled": True, "regimes": {"r4": {"lora_rank": 4}}, "regime_datasets": ["b"]},
        "datasets": {"a": {"source": "near-miss"}, "b": {"source": "local", "near_miss": {}}, "c": {"source": "local"}},
    }
    assert enabled(cfg, "bm25") and enabled(cfg, "bm25", "c")
    assert enabled(cfg, "compress") and enabled(cfg, "compress", "a") and not enabled(cfg, "compress", "b")
    assert not enabled(cfg, "colbert") and not enabled(cfg, "colbert", "a")
    assert (
        enabled(cfg, "twin_negatives", "a")
        and enabled(cfg, "twin_negatives", "b")
        and not enabled(cfg, "twin_negatives", "c")
    )
    assert enabled(cfg, "finetune_regime", "b") and not enabled(cfg, "finetune_regime", "a")
    cfg["finetune"]["enabled"] = False  # twin_negatives compares against rule finetune's adapter
    assert not enabled(cfg, "twin_negatives", "a")
    cfg["ladder"]["regimes"] = {}
    assert not enabled(cfg, "finetune_regime", "b")
