# Late interaction: a PyLate ColBERT fine-tuned on the train queries, MaxSim retrieval.


rule colbert:
    input:
        data="results/{dataset}/data",
    output:
        metrics="results/{dataset}/colbert/metrics.csv",
        curve="results/{dataset}/colbert/curve.csv",
        run="results/{dataset}/colbert/run.trec",
    log:
        "logs/colbert/{dataset}.log",
    benchmark:
        "benchmarks/rules/colbert/{dataset}.tsv"
    conda:
        "../../envs/colbert.yaml"
    threads: rule_threads("colbert")
    resources:
        mem_mb=rule_resource("colbert", "mem_mb"),
        runtime=rule_resource("colbert", "runtime"),
        gpu=rule_resource("colbert", "gpu"),
    params:
        colbert=lambda wc: colbert_params(wc.dataset),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
        # not outputs: a killed job keeps its checkpoint, model, encoded parts and index
        work=lambda wc: f"results/{wc.dataset}/colbert_work",
        extensions=".cache/torch_extensions",
    script:
        "../scripts/colbert.py"
