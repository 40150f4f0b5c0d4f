"""Run at the start of every Python process the Spark tests start (their PYTHONPATH names this
directory: ``tests/spark/conftest.py``): Spark's Python workers import pyspark and py4j from the
installed packages, whose bytecode is cached, instead of from the ``pyspark.zip`` and py4j zip of
that same installation, which Spark puts first on their path.

Why: at every streaming query's start Spark runs ``python -m
pyspark.sql.streaming.python_streaming_source_runner`` and gives it 10 seconds, fixed in
``PythonWorkerFactory.createSimpleWorker`` (SPARK-45245, no setting), to connect back. Imported
from the zip, where nothing is cached, every pyspark module it needs is compiled from source at
every start: ~1.1 s of CPU before it connects, against ~0.4 s from the installed package. With two
CPU-burning processes beside the suite that second left it a few seconds from the limit, and
queries failed with "Python worker failed to connect back". Only entries of the installation
whose packages are on the path too are moved (to the end, so they still serve if needed).
"""

from __future__ import annotations

import os
import sys


def _installed_packages_first() -> None:
    on_path = {os.path.realpath(entry) for entry in sys.path if entry}
    moved = []
    for entry in sys.path:
        name = os.path.basename(entry)
        if name == "pyspark.zip":
            package = "pyspark"
        elif name.startswith("py4j-") and name.endswith("-src.zip"):
            package = "py4j"
        else:
            continue
        # <site-packages>/pyspark/python/lib/<name>: the zip of a pip-installed pyspark.
        spark_home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(entry))))
        site = os.path.dirname(spark_home)
        if (
            os.path.basename(spark_home) == "pyspark"
            and site in on_path
            and os.path.isfile(os.path.join(site, package, "__init__.py"))
        ):
            moved.append(entry)
    for entry in moved:
        sys.path.remove(entry)
        sys.path.append(entry)


_installed_packages_first()
