"""The ``capgap`` command line (click): ``capgap diagnose`` runs ``capgap.diagnose`` on files a
user already has. Installed by ``[project.scripts]``."""

from __future__ import annotations

import logging
import sys

import click


@click.group()
def main() -> None:
    """capgap: is retrieval failing because the index can't represent the answer, or because
    the query encoder can't learn it?"""


@main.command()
@click.option(
    "--doc-embeddings",
    "docs",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="(n_docs, dim) float32/float16/float64, finite: .npy (memory-mapped; either byte order), .npz, a "
    "Parquet or Arrow/Feather table (.parquet, .arrow, .feather: a vector column, --column, and ids, "
    "--id-column), or a faiss index (.faiss/.index) whose vectors can be reconstructed: flat, SQ, PQ, "
    "IVF-Flat/SQ/PQ, HNSW, or an IndexIDMap around one (its reconstructed vectors are probed; its "
    "metric, inner product or L2, is used; faiss ids that are not 0..n-1 are the document ids, or line "
    "numbers of --doc-ids).",
)
@click.option(
    "--uncompressed-embeddings",
    "uncompressed",
    type=click.Path(exists=True, dir_okay=False),
    help="The same documents' full-precision vectors, same formats. Rows with ids (a table's id column, "
    "--uncompressed-id-column; a faiss index's ids) are matched to the documents by id; rows without "
    "ids are taken in the documents' row order (for an index with faiss ids: row = id). The probe also "
    "runs on them: a query they admit but the index's own vectors do not is compression-limited.",
)
@click.option(
    "--query-embeddings",
    "queries",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="(n_queries, dim), same formats.",
)
@click.option(
    "--qrels",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="BEIR tsv (query-id corpus-id score, header optional), TREC (qid iter docid rel) or 'qid docid'.",
)
@click.option(
    "--doc-ids",
    type=click.Path(exists=True, dir_okay=False),
    help="One id per line, one per document row (default: the row number; refused where a documents' table's "
    "own id column contradicts it).",
)
@click.option(
    "--query-ids",
    type=click.Path(exists=True, dir_okay=False),
    help="One id per line, one per query row (default: the qrels' query order, printed and recorded in "
    "summary.json; refused where the inputs contradict it: a row count other than the number of judged "
    "queries, judged ids that are the row numbers in another order, a query table's own id column).",
)
@click.option(
    "--ann-run",
    type=click.Path(exists=True, dir_okay=False),
    help="Your approximate search's results: TREC run or 'qid docid [score]' (TAB-separated lines may hold "
    "ids with spaces).",
)
@click.option(
    "--ann-run-percent-encoded",
    is_flag=True,
    help="The run's ids are percent-encoded, as in the run.trec files capgap writes (doc%200 = 'doc 0').",
)
@click.option(
    "--k", default=10, show_default=True, type=click.IntRange(1), help="The cut-off for every recall and verdict."
)
@click.option(
    "--metric",
    default=None,
    type=click.Choice(["ip", "cosine", "l2"]),
    help="ip (inner product), cosine (vectors L2-normalised into new arrays) or l2 (squared L2 distance). "
    "Default: a faiss index's own metric, else ip; another metric than the index's is an error (cosine "
    "on an inner-product index is allowed).",
)
@click.option(
    "--zero-norm",
    "zero_norm",
    default="error",
    show_default=True,
    type=click.Choice(["error", "set-apart"]),
    help="Under --metric cosine, a row of norm 0 (cosine undefined, e.g. an empty text embedded as zeros): "
    "an error naming the file and rows, or set-apart: such rows left out and counted in summary.json.",
)
@click.option(
    "--key",
    default=None,
    help="Array name inside the .npz files (needed where one holds several; a name a file lacks is an "
    "error). The default of --doc-key and --query-key, for each .npz among the files; an error where "
    "no file takes it.",
)
@click.option("--doc-key", default=None, help="Array name inside the documents' .npz; default --key.")
@click.option(
    "--uncompressed-key", default=None, help="Array name inside the uncompressed documents' .npz; default --doc-key."
)
@click.option(
    "--query-key",
    default=None,
    help="Array name inside the queries' .npz; default --key. One .npz holding "
    "both (np.savez(f, docs=D, queries=Q)): --doc-key docs --query-key "
    "queries.",
)
@click.option(
    "--column",
    default=None,
    help="Vector column of Parquet/Arrow tables: a list or fixed-size list of floats per row (default: the "
    "table's only such column). The default of --doc-column and --query-column, for each table among "
    "the files; an error where no file takes it.",
)
@click.option("--doc-column", default=None, help="Vector column of the documents' table; default --column.")
@click.option("--query-column", default=None, help="Vector column of the queries' table; default --column.")
@click.option(
    "--uncompressed-column",
    default=None,
    help="Vector column of the uncompressed documents' table; default --doc-column.",
)
@click.option(
    "--id-column",
    "id_column",
    default=None,
    help="Id column of Parquet/Arrow tables (strings or integers): the ids of their rows, in place of "
    "--doc-ids / --query-ids. The default of --doc-id-column and --query-id-column, for each table "
    "among the files; an error where no file takes it.",
)
@click.option(
    "--doc-id-column",
    default=None,
    help="Id column of the documents' table, in place of --doc-ids; default --id-column.",
)
@click.option(
    "--query-id-column",
    default=None,
    help="Id column of the queries' table, in place of --query-ids; default --id-column.",
)
@click.option(
    "--uncompressed-id-column",
    default=None,
    help="Id column of the uncompressed documents' table: its rows are matched to the documents by these "
    "ids. Default --doc-id-column, where the table has that column.",
)
@click.option("--threads", default=None, type=int, help="BLAS threads (default: all).")
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder for per_query.tsv, summary.json, summary.md, verdicts.png.",
)
def diagnose(
    docs,
    uncompressed,
    queries,
    qrels,
    doc_ids,
    query_ids,
    ann_run,
    ann_run_percent_encoded,
    k,
    metric,
    zero_norm,
    key,
    doc_key,
    uncompressed_key,
    query_key,
    column,
    doc_column,
    query_column,
    uncompressed_column,
    id_column,
    doc_id_column,
    query_id_column,
    uncompressed_id_column,
    threads,
    out,
) -> None:
    """Per-query verdict: index-limited, compression-limited (with --uncompressed-embeddings), encoder-limited,
    ann-limited or ok."""
    from .diagnosis import diagnose as run  # lazy: `capgap --help` starts without numpy / the probe
    from .diagnosis import (  # lazy: as above
        document_ids,
        load_embeddings,
        load_qrels_file,
        load_run_file,
        match_uncompressed,
        resolve_metric,
        row_ids,
        write_diagnosis,
    )
    from .diagnosis.prepare import document_id_default, qrels_order_ids, refuse_contradicting_column  # lazy: as above
    from .diagnosis.runs import orient_run  # lazy: as above
    from .diagnosis.tables import table_columns  # lazy: as above
    from .errors import DataFormatError, OutputWriteError  # lazy: beside the others, only this command raises them

    logging.basicConfig(level=logging.WARNING, format="capgap: %(message)s")
    try:
        # each checked: shape, dtype, finite values; a table's ids checked too
        # per-file options, the shared ones as their default: (value, option name for messages)
        if uncompressed is None:
            for value, name in (
                (uncompressed_key, "--uncompressed-key"),
                (uncompressed_column, "--uncompressed-column"),
            ):
                if value is not None:
                    raise ValueError(f"{name} is given without --uncompressed-embeddings")
        files = {"documents": docs, "queries": queries, "uncompressed documents": uncompressed}
        dkey, qkey, ukey = _file_options(
            files,
            "key",
            key,
            "--key",
            {
                "documents": (doc_key, "--doc-key", ()),
                "queries": (query_key, "--query-key", ()),
                "uncompressed documents": (uncompressed_key, "--uncompressed-key", ((doc_key, "--doc-key"),)),
            },
        )
        dcol, qcol, ucol = _file_options(
            files,
            "column",
            column,
            "--column",
            {
                "documents": (doc_column, "--doc-column", ()),
                "queries": (query_column, "--query-column", ()),
                "uncompressed documents": (
                    uncompressed_column,
                    "--uncompressed-column",
                    ((doc_column, "--doc-column"),),
                ),
            },
        )
        did, qid = _file_options(
            files,
            "id_column",
            id_column,
            "--id-column",
            {
                "documents": (doc_id_column, "--doc-id-column", ()),
                "queries": (query_id_column, "--query-id-column", ()),
            },
        )
        docs_in = load_embeddings(
            docs, dkey[0], dcol[0], did[0], key_option=dkey[1], column_option=dcol[1], id_column_option=did[1]
        )
        queries_in = load_embeddings(
            queries, qkey[0], qcol[0], qid[0], key_option=qkey[1], column_option=qcol[1], id_column_option=qid[1]
        )
        if docs_in.matrix.shape[1] != queries_in.matrix.shape[1]:
            raise ValueError(
                f"dimension mismatch: {docs} has dim {docs_in.matrix.shape[1]}, {queries} has dim "
                f"{queries_in.matrix.shape[1]}"
            )
        metric = resolve_metric(metric, docs_in.metric, docs)
        uid = (uncompressed_id_column, "--uncompressed-id-column") if uncompressed_id_column is not None else did
        if uncompressed_id_column is None and uncompressed and uid[0] not in table_columns(uncompressed):
            uid = (None, uid[1])  # the documents' id column, only where the uncompressed table has it
        uncompressed_in = (
            load_embeddings(
                uncompressed,
                ukey[0],
                ucol[0],
                uid[0],
                key_option=ukey[1],
                column_option=ucol[1],
                id_column_option=uid[1],
            )
            if uncompressed
            else None
        )
        if uncompressed_in is not None and uncompressed_in.metric is not None:
            # a faiss file of uncompressed vectors: scored by its own metric too
            resolve_metric(metric, uncompressed_in.metric, uncompressed)
        qr = load_qrels_file(qrels)
        listed = row_ids(docs_in, doc_ids, "--doc-ids", did[1])
        listed_path = doc_ids or (did[1] if docs_in.row_ids else "--doc-ids")
        dids = document_ids(docs_in, listed, listed_path)
        qids = row_ids(queries_in, query_ids, "--query-ids", qid[1])  # an ids file or the table's id column
        id_defaults = {}  # a default pairing of rows with ids is printed and recorded (summary.json id_defaults)
        if listed is None:  # refused where the table has its own document ids
            refuse_contradicting_column(
                docs,
                {d for r in qr.values() for d in r},
                dids,
                "no document ids given "
                "(--doc-ids, --doc-id-column), so document row i would be document id 'i' "
                "(the row number)",
                "every document id the qrels name",
                "--doc-id-column",
            )
            id_defaults["documents"] = document_id_default(dids, docs_in.ids is not None)
        if qids is None:  # the qrels' order, refused where the row count or the table's own query ids contradict it
            qids, id_defaults["queries"] = qrels_order_ids(queries_in.matrix.shape[0], qr, qrels, queries)
            refuse_contradicting_column(
                queries,
                qids,
                qids,
                "no query ids given (--query-ids, --query-id-column), so "
                f"query row i would be the i-th query id of {qrels}, in order of first "
                "appearance",
                "the judged query ids",
                "--query-id-column",
            )
        for ids, emb, path, key_opt, source, what in (
            (
                dids,
                docs_in,
                docs,
                dkey,
                doc_ids or (f"{docs} column {did[0]!r}" if docs_in.row_ids else None),
                "document",
            ),
            (
                qids,
                queries_in,
                queries,
                qkey,
                query_ids or (f"{queries} column {qid[0]!r}" if queries_in.row_ids else None),
                "query",
            ),
        ):
            n = emb.matrix.shape[0]
            if source and len(ids) != n:  # name both files (and the key both share, where it is the shared one)
                where = f"{path}[{key_opt[0]!r}]" if key_opt[0] else str(path)
                shared = (
                    "; --key names the array in both files: --doc-key and --query-key name one each"
                    if key_opt[1] == "--key" and key_opt[0]
                    else ""
                )
                raise ValueError(f"{source}: {len(ids)} {what} ids for the {n} rows of {where}{shared}")
        uncompressed_matrix = None
        if uncompressed_in is not None:  # by id where the uncompressed rows have ids; named errors
            uncompressed_matrix = match_uncompressed(docs_in, uncompressed_in, listed, listed_path)
            # by position: printed, recorded, refused where the table has ids
            if uncompressed_in.row_ids is None and uncompressed_in.ids is None:
                paired = [None] * uncompressed_in.matrix.shape[0]
                for d, r in zip(dids, docs_in.ids if docs_in.ids is not None else range(len(dids))):
                    paired[int(r)] = d
                refuse_contradicting_column(
                    uncompressed,
                    dids,
                    paired,
                    f"its rows are paired with the documents of {docs} by position (no --uncompressed-id-column)",
                    f"the document ids of {docs}",
                    "--uncompressed-id-column",
                )
                rule = f"row j of {uncompressed} is the document " + (
                    f"with faiss id j in {docs}" if docs_in.ids is not None else f"of row j of {docs}"
                )
                id_defaults["uncompressed"] = {"rule": rule, "first": paired[:3]}
        ann = None
        if ann_run:  # scores with no rank column to order them: similarities or distances, by the vectors
            ann = orient_run(
                load_run_file(ann_run, ann_run_percent_encoded),
                ann_run,
                docs_in.matrix,
                queries_in.matrix,
                dids,
                qids,
                metric,
            )
        diag = run(
            docs_in.matrix,
            queries_in.matrix,
            qr,
            dids,
            qids,
            k=k,
            ann_run=ann,
            metric=metric,
            threads=threads,
            uncompressed=uncompressed_matrix,
            index_info=docs_in.info(),
            uncompressed_info=uncompressed_in.info() if uncompressed_in is not None else None,
            zero_norm=zero_norm,
            paths={"documents": docs, "queries": queries, "uncompressed documents": uncompressed},
            id_defaults=id_defaults or None,
        )
    except (DataFormatError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    try:
        paths = write_diagnosis(diag, out)  # all four outputs or none
    except OutputWriteError as e:  # a full disk: "cannot write <out>/summary.json: No space left on device"
        raise click.ClickException(str(e)) from e
    click.echo(diag.summary["reading"])
    click.echo(f"verdicts: {diag.summary['verdicts']}")
    click.echo(f"wrote {', '.join(str(p) for p in paths.values())}")


def _file_options(files: dict, option: str, shared, shared_name: str, own: dict) -> list[tuple]:
    """Each file's ``(value, option name for messages)`` for one family of per-file options
    (``option``: ``"key"``, ``"column"`` or ``"id_column"``, ``capgap.diagnosis.inputs.OPTION_FORMATS``).

    ``own``: file name (a key of ``files``, whose values are paths or None) -> ``(value, name,
    defaults)``. A file's own option is taken as given (``load_embeddings`` refuses it where the
    file takes no such option); else the first of ``defaults`` (``(value, name)`` pairs), then
    the shared option, that is given and applies to the file's format. Where none is, the value
    is None and the name says which options would give one (``--query-column (or --column for
    every table)``). Raises ``ValueError`` when the shared option is given and applies to no file
    (each file's format or own option named)."""
    from .diagnosis.inputs import FORMAT_NAMES, OPTION_FORMATS, embedding_format  # lazy: as in diagnose

    wanted, what = OPTION_FORMATS[option]
    noun = {"npz": ".npz", "table": "table"}[wanted]
    out, why, used = [], [], False
    for file, (value, name, defaults) in own.items():
        path = files[file]
        if path is None:
            out.append((None, None))
            continue
        if value is not None:
            out.append((value, name))
            why.append(f"{path} takes {name}")
            continue
        fmt = embedding_format(path) if shared is not None or any(v is not None for v, _ in defaults) else None
        pick = next(((v, n) for v, n in (*defaults, (shared, shared_name)) if v is not None and fmt == wanted), None)
        used = used or (pick is not None and pick[1] == shared_name)
        out.append(pick or (None, f"{name} (or {shared_name} for every {noun})"))
        if shared is not None:
            why.append(f"{path} takes {pick[1]}" if pick else f"{path} is {FORMAT_NAMES[fmt]}")
    if shared is not None and not used:
        raise ValueError(f"{shared_name} applies to {what}, and no file takes it: {', '.join(why)}")
    return out


if __name__ == "__main__":
    sys.exit(main())
