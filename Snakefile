# capgap: the experiment DAG. A table of contents only; logic lives in src/capgap/.
from snakemake.utils import min_version, validate

min_version("9.0")


# The default config applies only when no --configfile/--config is given, so a named config
# (config/large.yaml, a test config) is used as written, not deep-merged into the default.
if not config:

    configfile: "config/config.yaml"


validate(config, "src/capgap/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/index.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/probe.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/baselines.smk"
include: "workflow/rules/colbert.smk"
include: "workflow/rules/hardness.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        all_outputs(),
