"""``strom pipeline``: data pipelines on Spark (``local[*]`` by default, ``--master`` for any master).

strom pipeline archive --topics T1,T2 --output PATH
strom pipeline demo-events --topic page_views --rate 200 [--count 10000]
strom pipeline pageviews --from page_views --to page_view_counts --checkpoint DIR
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from typing import Any

from strom.cli.output import CliError

__all__ = ["add_pipeline_parser", "require_spark"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _common(parser: argparse.ArgumentParser, *, spark: bool) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"default {DEFAULT_BOOTSTRAP}",
    )
    if spark:
        parser.add_argument(
            "--master",
            default="local[*]",
            help="Spark master URL (default local[*]: all cores of this machine)",
        )


def add_pipeline_parser(subparsers: Any) -> None:
    """Register ``strom pipeline ...`` on the ``strom`` command's subparsers."""
    pipeline = subparsers.add_parser(
        "pipeline", help="data pipelines on Spark", description="Data pipelines on Apache Spark (PySpark)."
    )
    commands = pipeline.add_subparsers(dest="pipeline_command", metavar="PIPELINE")
    commands.required = True

    archive = commands.add_parser(
        "archive",
        help="archive new records as Parquet partitioned by topic and date",
        description="Write every record not archived yet to PATH as Parquet, partitioned by topic and "
        "date. Progress is kept in PATH/_checkpoint: re-running after a crash writes no duplicate and "
        "skips nothing.",
    )
    archive.add_argument("--topics", required=True, help="comma-separated topic names")
    archive.add_argument(
        "--output", required=True, metavar="PATH", help="archive directory (or any Hadoop path)"
    )
    _common(archive, spark=True)
    archive.set_defaults(run=_archive)

    demo = commands.add_parser(
        "demo-events",
        help="produce synthetic page-view events",
        description='Produce JSON page views {"user", "page", "timestamp"} at a steady rate.',
    )
    demo.add_argument("--topic", default="page_views", help="default page_views")
    demo.add_argument("--rate", type=float, required=True, metavar="N", help="events per second")
    demo.add_argument(
        "--count",
        type=int,
        default=None,
        metavar="M",
        help="stop after M events (default: run until stopped)",
    )
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    _common(demo, spark=False)
    demo.set_defaults(run=_demo_events)

    views = commands.add_parser(
        "pageviews",
        help="count page views per page in 1-minute windows (Structured Streaming)",
        description="Parse page views, count them per page in 1-minute tumbling windows with a watermark, "
        "and write the counts to a topic (key page|window start, JSON value), checkpointed.",
    )
    views.add_argument("--from", dest="source_topic", required=True, metavar="TOPIC")
    views.add_argument("--to", dest="target_topic", required=True, metavar="TOPIC")
    views.add_argument("--checkpoint", required=True, metavar="DIR")
    views.add_argument("--watermark", default="1 minute", help="how late an event may be (default 1 minute)")
    views.add_argument(
        "--available-now", action="store_true", help="process what is in the topic now, then stop"
    )
    _common(views, spark=True)
    views.set_defaults(run=_pageviews)


# What format("strom") and the pipelines import beyond strom's own dependencies (the spark extra).
SPARK_MODULES = ("pyspark", "pyarrow")


def require_spark() -> None:
    """One clear line, not a ModuleNotFoundError, when the spark extra is not installed."""
    missing = [name for name in SPARK_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise CliError(
            f"strom pipeline runs on Spark, and {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
            "not installed: pip install pyspark pyarrow (in a clone of strom: pip install -e '.[spark]'; "
            "from a wheel: pip install 'strom-VERSION-py3-none-any.whl[spark]'); Spark needs Java 17 or newer"
        )


def _archive(arguments: argparse.Namespace) -> int:
    require_spark()
    from strom.spark.pipelines import archive, local_session

    topics = [topic.strip() for topic in arguments.topics.split(",") if topic.strip()]
    spark = local_session(arguments.master, "strom-archive")
    try:
        archived = archive(spark, arguments.bootstrap_server, topics, arguments.output)
    finally:
        spark.stop()
    print(json.dumps({"output": arguments.output, "records_archived": archived}))
    return 0


def _demo_events(arguments: argparse.Namespace) -> int:
    from strom.client.producer import Producer
    from strom.spark.demo_events import produce_page_views

    if arguments.rate <= 0:
        raise SystemExit("strom pipeline demo-events: --rate must be positive")
    with Producer({"bootstrap.servers": arguments.bootstrap_server}) as producer:
        sent = produce_page_views(producer, arguments.topic, arguments.rate, arguments.count, arguments.seed)
    print(json.dumps({"topic": arguments.topic, "sent": sent}))
    return 0


def _pageviews(arguments: argparse.Namespace) -> int:
    require_spark()
    from strom.spark.pipelines import local_session, pageviews

    spark = local_session(arguments.master, "strom-pageviews")
    try:
        query = pageviews(
            spark,
            arguments.bootstrap_server,
            arguments.source_topic,
            arguments.target_topic,
            arguments.checkpoint,
            watermark=arguments.watermark,
            available_now=arguments.available_now,
        )
        query.awaitTermination()
    finally:
        spark.stop()
    return 0
