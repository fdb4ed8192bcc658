# The parity hardness task: perfect ReLU encoder, capacity probe, gradient-trained encoders.


rule hardness:
    output:
        metrics="results/hardness/metrics.csv",
        summary="results/hardness/summary.json",
    log:
        "logs/hardness/hardness.log",
    benchmark:
        "benchmarks/rules/hardness/hardness.tsv"
    conda:
        "../../envs/hardness.yaml"
    threads: rule_threads("hardness")
    resources:
        mem_mb=rule_resource("hardness", "mem_mb"),
        runtime=rule_resource("hardness", "runtime"),
        gpu=rule_resource("hardness", "gpu"),
    params:
        hardness=canonical(
            {k: v for k, v in config.get("hardness", {}).items() if k != "enabled"}
        ),
        probe=canonical({k: v for k, v in config["probe"].items() if k != "enabled"}),
    script:
        "../scripts/hardness.py"
