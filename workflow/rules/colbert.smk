# Late interaction: a PyLate ColBERT fine-tuned on the train queries, MaxSim retrieval.


rule colbert:
    input:
        data=rules.data.output[0],
    output:
        metrics="results/{dataset}/colbert/metrics.csv",
        curve="results/{dataset}/colbert/curve.csv",
        run="results/{dataset}/colbert/run.trec",
    log:
        "logs/colbert/{dataset}.log",
    benchmark:
        "benchmarks/rules/colbert/{dataset}.tsv"
    priority: 2  # long jobs first: docs/pipeline.md, Scheduling
    conda:
        "../../envs/colbert.yaml"
    params:
        colbert=lambda wc: colbert_params(config, wc.dataset),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
        # not outputs: a killed job keeps its checkpoint, model, encoded parts and index
        work=lambda wc: f"results/{wc.dataset}/colbert_work",
        extensions=".cache/torch_extensions",
    script:
        "../scripts/colbert.py"
