# Obtain each dataset (mirror, generator or download) and write its canonical copy.
# A checkpoint: whether a dataset is available decides which jobs exist downstream.


checkpoint data:
    output:
        directory("results/{dataset}/data"),
    log:
        "logs/data/{dataset}.log",
    benchmark:
        "benchmarks/rules/data/{dataset}.tsv"
    priority: 4  # a checkpoint: the jobs after it are known only once it has run (docs/pipeline.md, Scheduling)
    conda:
        "../../envs/data.yaml"
    params:
        dataset=lambda wc: wc.dataset,
        spec=lambda wc: dataset_spec(config, wc.dataset),
        # "local" or "remote:offline/online": reruns the rule when a missing dataset appears
        availability=lambda wc: current_availability(
            wc.dataset, config["datasets"][wc.dataset], recorded_status(wc.dataset)
        ),
        # content digest of a path:/mirror dataset's files: an edited source reruns the rule
        source=lambda wc: current_digest(
            wc.dataset, config["datasets"][wc.dataset], recorded_status(wc.dataset)
        ),
    script:
        "../scripts/data.py"
