"""Generates strom's protocol codecs from Kafka's JSON message specifications.

Run `python -m tools.codegen --spec ../shared/reference/kafka-protocol` to (re)write the generated
modules, or add `--check` to only verify the checked-in files are current (CI does this).
"""
