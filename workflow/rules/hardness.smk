# The parity hardness task: perfect ReLU encoder, capacity probe, gradient-trained encoders.


rule hardness:
    output:
        metrics="results/hardness/metrics.csv",
        summary="results/hardness/summary.json",
    params:
        hardness=canonical({k: v for k, v in config.get("hardness", {}).items() if k != "enabled"}),
        probe=canonical({k: v for k, v in config["probe"].items() if k != "enabled"}),
    log:
        "logs/hardness/hardness.log",
    benchmark:
        "benchmarks/rules/hardness/hardness.tsv"
    threads: 2
    resources:
        mem_mb=2000,
    conda:
        "../../envs/capgap.yaml"
    script:
        "../scripts/hardness.py"
