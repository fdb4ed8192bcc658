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
    params:
        hardness=settings(config, "hardness"),
        probe=settings(config, "probe", drop=("shards",)),
    script:
        "../scripts/hardness.py"
