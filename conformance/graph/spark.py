"""One SparkSession for the trace pipeline, set up so that it works with no setup and stays quiet.

Theory of operation: `session(master)` returns the process's SparkSession, building it on first use. With no
master it runs `local[*]` on this machine; any other master URL (`spark://host:7077`, `yarn`, `k8s://...`) is passed
to the builder unchanged, together with any `--conf key=value` the caller gives. The facts it encodes were measured
(docs/performance.md, /work/shared/TOOLCHAIN.md):

- the Python workers must run this virtualenv's interpreter, or they cannot import lark: PYSPARK_PYTHON is set to
  `sys.executable` unless the caller set it;
- in local mode the JVM binds to 127.0.0.1 (SPARK_LOCAL_IP), so no network interface or DNS name is needed;
- the console progress bar, the web UI and Spark's INFO/WARN logging are off (a log4j2 file written once to the
  temp folder); `verbose=True` keeps Spark's warnings;
- shuffles use a few partitions (2 per core): the pipeline's shuffles are small, and Spark's default of 200 tasks
  per shuffle costs more than the work in them.

A session, once built, is reused for the life of the process (the tests share one); `stop()` ends it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Mapping

from zabref.storage.atomic import write_file

__all__ = ["session", "stop", "hadoop_fs"]

_LOG4J2 = """\
# Written by conformance/graph/spark.py. The root level stays at warn while the JVM starts (a shell-like gateway whose
# level differs from the root's prints a banner); the session lowers it to error once built.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
"""


def _log4j2_file() -> Path:
    path = Path(tempfile.gettempdir()) / "zabref-spark-log4j2.properties"
    if not path.is_file() or path.read_text(encoding="utf-8") != _LOG4J2:
        write_file(path, _LOG4J2)
    return path


def session(master: str | None = None, conf: Mapping[str, str] | None = None, verbose: bool = False):
    """The process's SparkSession (built on the first call; later calls return it and ignore their arguments)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    master = master or "local[*]"
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    cores = os.cpu_count() or 2
    builder = (SparkSession.builder.master(master).appName("zabref-traces")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(2 * cores))
               .config("spark.sql.adaptive.enabled", "true")
               .config("spark.python.worker.reuse", "true"))
    if not verbose:
        option = f"-Dlog4j2.configurationFile=file:{_log4j2_file()}"
        builder = (builder.config("spark.driver.extraJavaOptions", option)
                   .config("spark.executor.extraJavaOptions", option))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    return spark


def stop() -> None:
    """Stop the process's session, if there is one."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def hadoop_fs(spark, path: str):
    """(FileSystem, Path) of Hadoop for `path`: renames and deletes that work on local disks and on HDFS alike."""
    jvm = spark.sparkContext._jvm
    jpath = jvm.org.apache.hadoop.fs.Path(path)
    return jpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), jpath
