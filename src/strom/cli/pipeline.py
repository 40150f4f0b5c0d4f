"""``strom pipeline``: data pipelines on Spark (``local[*]`` by default, ``--master`` for any master).

strom pipeline archive --topics T1,T2 --output PATH
strom pipeline demo-events --topic page_views --rate 200 [--count 10000]
strom pipeline pageviews --from page_views --to page_view_counts --checkpoint DIR

Before Spark starts (which takes seconds), the command checks what it can with strom's client:
that the cluster answers (a refused connection is reported at once, a silent one after
``--request-timeout-ms``) and that the topics to read exist. A query that fails later ends with
one line saying why, not Spark's trace (``-v`` shows Spark's log).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from strom.cli.common import (
    add_client_config_argument,
    client_settings,
    common_client_config,
    parse_key_value,
)
from strom.cli.output import CliError, UsageError

log = logging.getLogger("strom.cli.pipeline")

__all__ = ["add_pipeline_parser", "require_spark"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_REQUEST_TIMEOUT_MS = 10_000
# How often a running pageviews query is looked at for new progress to print.
PROGRESS_POLL_S = 1.0
# Spark's own log at each -v count: nothing but fatal errors by default (the command says what
# happened, and a failed query's error in one line), its errors and warnings with -v, info with -vv.
SPARK_LOG_LEVELS = {0: "FATAL", 1: "WARN"}
# The driver JVM's log configuration (Log4j 2), from its start: Spark's default one announces
# itself, its level and a missing native library on every run before setLogLevel can be called.
# (Driven from Python, Spark sets the root level to its Python gateway's logger's level, WARN
# unless configured, and says so when they differ.)
LOG4J2_PROPERTIES = """\
rootLogger.level = {level}
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def _common(parser: argparse.ArgumentParser, *, spark: bool) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"default {DEFAULT_BOOTSTRAP}; on a Spark cluster every executor must reach it",
    )
    # Security settings and the like, for the pipeline's own clients and (as kafka.* options) for
    # the clients Spark's tasks run; file paths in them must hold on every executor.
    add_client_config_argument(parser, "pipeline")
    parser.add_argument(
        "--request-timeout-ms",
        type=int,
        default=DEFAULT_REQUEST_TIMEOUT_MS,
        metavar="MS",
        help=f"how long one request to the cluster may take (default {DEFAULT_REQUEST_TIMEOUT_MS})",
    )
    if spark:
        parser.add_argument(
            "--master",
            default="local[*]",
            help="Spark master URL: local[*] (default: all cores of this machine), spark://HOST:PORT, ...",
        )
        parser.add_argument(
            "--conf",
            dest="spark_conf",
            type=parse_key_value,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a Spark setting, as spark-submit's --conf (repeatable), e.g. --conf spark.executor.memory=2g",
        )
        parser.add_argument(
            "--option",
            dest="source_options",
            type=parse_key_value,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="an option of the format('strom') read (repeatable; docs/spark.md lists them), "
            "e.g. --option maxOffsetsPerTrigger=100000 or --option failOnDataLoss=false",
        )
        parser.add_argument(
            "--group",
            default=None,
            metavar="GROUP",
            help="consumer group the pipeline commits its progress to, so `strom groups describe GROUP` "
            "shows its lag (default: named after the pipeline's output)",
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
        "skips nothing; a lost checkpoint is rebuilt from what PATH holds. Progress is also committed "
        "to a consumer group (default strom-archive-<last part of PATH>).",
    )
    archive.add_argument("--topics", required=True, help="comma-separated topic names")
    archive.add_argument(
        "--output", required=True, metavar="PATH", help="archive directory (or any Hadoop path)"
    )
    _common(archive, spark=True)
    archive.set_defaults(run=_archive, command_parser=archive)

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
    demo.set_defaults(run=_demo_events, command_parser=demo)

    views = commands.add_parser(
        "pageviews",
        help="count page views per page in 1-minute windows (Structured Streaming)",
        description="Parse page views, count them per page in 1-minute tumbling windows with a watermark, "
        "and write the counts to a topic (key page|window start, JSON value), checkpointed. Prints a "
        "line per micro-batch on stderr; stops on Ctrl-C or SIGTERM (or, with --available-now, when "
        "caught up) and prints a summary. Progress is committed to a consumer group (default "
        "strom-pageviews-<the --to topic>).",
    )
    views.add_argument("--from", dest="source_topic", required=True, metavar="TOPIC")
    views.add_argument("--to", dest="target_topic", required=True, metavar="TOPIC")
    views.add_argument("--checkpoint", required=True, metavar="DIR")
    views.add_argument("--watermark", default="1 minute", help="how late an event may be (default 1 minute)")
    views.add_argument(
        "--available-now", action="store_true", help="process what is in the topic now, then stop"
    )
    _common(views, spark=True)
    views.set_defaults(run=_pageviews, command_parser=views)


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


def _check_topics_exist(arguments: argparse.Namespace, topics: list[str]) -> None:
    """Before Spark starts: the cluster answers (at once when nothing listens there) and the
    topics to read exist (a pipeline reading a topic that is not there would archive nothing)."""
    from strom.client.admin import Admin

    with Admin(client_settings(arguments)) as admin:
        existing = set(admin.list_topics())
    missing = [topic for topic in topics if topic not in existing]
    if missing:
        raise CliError(
            f"{'topic' if len(missing) == 1 else 'topics'} {', '.join(missing)} "
            f"{'does' if len(missing) == 1 else 'do'} not exist at {arguments.bootstrap_server} "
            "(`strom topics list` shows the topics there are)"
        )


def _source_options(arguments: argparse.Namespace) -> dict[str, str]:
    """``--option`` settings, with the request timeout for the pipeline's own clients."""
    options = {"kafka.request.timeout.ms": str(arguments.request_timeout_ms)}
    options.update(
        {
            f"kafka.{key}": str(value)
            for key, value in common_client_config(arguments).items()
            if key != "bootstrap.servers"
        }
    )
    options.update(dict(arguments.source_options))
    return options


@contextlib.contextmanager
def _session(arguments: argparse.Namespace, app_name: str) -> Iterator[Any]:
    """A SparkSession for the command, stopped at the end."""
    from strom.spark.pipelines import spark_session

    level = SPARK_LOG_LEVELS.get(arguments.verbose, "INFO")
    with tempfile.TemporaryDirectory(prefix="strom-pipeline-") as directory:
        log_config = Path(directory) / "log4j2.properties"
        log_config.write_text(LOG4J2_PROPERTIES.format(level=level.lower()))
        conf = {
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log_config}",
        }
        conf.update(dict(arguments.spark_conf))
        try:
            spark = spark_session(arguments.master, app_name, conf)
        except Exception as error:
            raise CliError(
                f"cannot start Spark (--master {arguments.master}): {spark_failure(error)}"
            ) from None
        try:
            spark.sparkContext.setLogLevel(level)
            quiet_accumulator_server(spark.sparkContext)
            yield spark
        finally:
            spark.stop()


def quiet_accumulator_server(context: Any) -> None:
    """PySpark's accumulator server (the driver's socket the JVM sends accumulator updates to)
    prints a Python traceback on stderr when the JVM closes its connection while the command
    stops (an EOFError in its request handler): noise at the end of a clean Ctrl-C or SIGTERM,
    seen in about one stop in three under load. Its errors go to this module's debug log."""
    server = getattr(context, "_accumulatorServer", None)
    if server is None:
        return

    def handle_error(_request: object, client_address: object) -> None:
        log.debug("Spark's accumulator server: a connection from %s failed", client_address, exc_info=True)

    server.handle_error = handle_error


# The last line of a Python traceback Spark carries in its message: "package.module.SomeError: text".
_PYTHON_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception)): (.+)$")


def spark_failure(error: BaseException) -> str:
    """A failed Spark job in one line: the error the Python code raised (the data source's, in a
    worker) when Spark's message carries one, else the first line of Spark's own message."""
    text = str(error)
    found = [match for line in text.splitlines() if (match := _PYTHON_ERROR_LINE.match(line.strip()))]
    # strom's own error if there is one (a chained traceback may end in an error of PySpark's
    # handling it), else the first: the cause comes first in a chained traceback.
    ours = [match for match in found if match.group(0).startswith("strom.")]
    if found:
        chosen = (ours or found)[0]
        name, message = chosen.group(1), chosen.group(2)
        return f"{name}: {message}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return first


def _run_query(name: str, wait: Any) -> Any:
    """Run ``wait()`` (which waits for a streaming query); a failed query becomes one CliError."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        return wait()
    except (PySparkException, Py4JError) as error:
        raise CliError(f"the {name} query failed: {spark_failure(error)} (-v shows Spark's log)") from None


def _archive(arguments: argparse.Namespace) -> int:
    require_spark()
    topics = [topic.strip() for topic in arguments.topics.split(",") if topic.strip()]
    if not topics:
        raise UsageError("--topics names no topic")
    _check_topics_exist(arguments, topics)
    from strom.spark.archive_state import ArchiveStateError
    from strom.spark.pipelines import archive, default_archive_group

    group = arguments.group or default_archive_group(arguments.output)
    with _session(arguments, "strom-archive") as spark:
        try:
            archived = _run_query(
                "archive",
                lambda: archive(
                    spark,
                    arguments.bootstrap_server,
                    topics,
                    arguments.output,
                    _source_options(arguments),
                    group_id=group,
                ),
            )
        except ArchiveStateError as error:
            raise CliError(str(error)) from None
    print(json.dumps({"output": arguments.output, "records_archived": archived, "group": group}))
    return 0


def _demo_events(arguments: argparse.Namespace) -> int:
    from strom.client.producer import Producer
    from strom.spark.demo_events import produce_page_views

    if arguments.rate <= 0:
        raise UsageError("--rate must be positive")
    with Producer(client_settings(arguments)) as producer:
        sent = produce_page_views(producer, arguments.topic, arguments.rate, arguments.count, arguments.seed)
    print(json.dumps({"topic": arguments.topic, "sent": sent}))
    return 0


class _ProgressPrinter:
    """Prints each micro-batch's progress once, as it appears in the query's recent progress."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last_batch_id = -1
        self.total_rows = 0
        self.batches = 0

    def __call__(self, query: Any) -> None:
        from strom.spark.pipelines import describe_progress

        for progress in query.recentProgress:
            batch_id = int(progress["batchId"])
            rows = int(progress["numInputRows"] or 0)
            if batch_id <= self.last_batch_id or rows == 0:
                continue  # printed already, or an idle trigger: nothing to say
            self.last_batch_id = batch_id
            self.total_rows += rows
            self.batches += 1
            print(f"{self.name}: {describe_progress(progress, self.total_rows)}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _stop_requests() -> Iterator[threading.Event]:
    """SIGINT and SIGTERM set the event instead of raising: raised inside a call to Spark (py4j), the
    exception would break that call's connection and py4j would print a traceback."""
    stop = threading.Event()

    def request_stop(signal_number: int, frame: object) -> None:
        stop.set()

    previous = {number: signal.signal(number, request_stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _pageviews(arguments: argparse.Namespace) -> int:
    require_spark()
    _check_topics_exist(arguments, [arguments.source_topic])
    from strom.spark.pipelines import default_pageviews_group, pageviews

    group = arguments.group or default_pageviews_group(arguments.target_topic)
    printer = _ProgressPrinter("pageviews")
    stopped = False
    with _session(arguments, "strom-pageviews") as spark:
        query = _run_query(
            "pageviews",
            lambda: pageviews(
                spark,
                arguments.bootstrap_server,
                arguments.source_topic,
                arguments.target_topic,
                arguments.checkpoint,
                watermark=arguments.watermark,
                available_now=arguments.available_now,
                extra_options=_source_options(arguments),
                group_id=group,
            ),
        )
        with _stop_requests() as stop:
            while query.isActive and not stop.wait(PROGRESS_POLL_S):
                printer(query)
        if stop.is_set():
            # Ctrl-C or SIGTERM: the normal way to stop a running pipeline. The batch in flight is
            # abandoned; its offsets are in the checkpoint, so the next run redoes it.
            stopped = True
            query.stop()
        printer(query)
        if not stopped:
            _run_query("pageviews", query.awaitTermination)  # raises what the query failed with
    summary: Mapping[str, Any] = {
        "from": arguments.source_topic,
        "to": arguments.target_topic,
        "records_read": printer.total_rows,
        "batches": printer.batches,
        "group": group,
    }
    if stopped:
        print("pageviews: stopped", file=sys.stderr)
    print(json.dumps(summary))
    return 0
