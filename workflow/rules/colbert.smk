# Late interaction: a PyLate ColBERT fine-tuned on the train queries, MaxSim retrieval.


rule colbert:
    input:
        data="results/{dataset}/data",
    output:
        metrics="results/{dataset}/colbert/metrics.csv",
        curve="results/{dataset}/colbert/curve.csv",
        run="results/{dataset}/colbert/run.trec",
    params:
        colbert=canonical({k: v for k, v in config.get("colbert", {}).items() if k not in ("enabled", "datasets")}),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
        # not outputs: a killed job keeps its checkpoint, model, encoded parts and index
        work=lambda wc: f"results/{wc.dataset}/colbert_work",
        extensions=".cache/torch_extensions",
    log:
        "logs/colbert/{dataset}.log",
    benchmark:
        "benchmarks/rules/colbert/{dataset}.tsv"
    threads: 8
    resources:
        mem_mb=16000,
    conda:
        "../../envs/capgap.yaml"
    script:
        "../scripts/colbert.py"
