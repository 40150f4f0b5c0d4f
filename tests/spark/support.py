"""Helpers shared by the Spark tests: producing known records and creating topics."""

from __future__ import annotations

from dataclasses import dataclass

from strom.client.admin import Admin, NewTopic
from strom.client.producer import Producer


@dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])


def produce(
    bootstrap: str,
    topic: str,
    values: list[bytes | None],
    *,
    keys: list[bytes | None] | None = None,
    headers: list[list[tuple[str, bytes | None]]] | None = None,
    partition: int | None = None,
) -> list[Produced]:
    """Send and wait for every acknowledgement; returns where each record landed."""
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        futures = [
            producer.send(
                topic,
                value=value,
                key=keys[index] if keys else None,
                headers=headers[index] if headers else None,
                partition=partition,
            )
            for index, value in enumerate(values)
        ]
        producer.flush()
        results = [future.result() for future in futures]
    return [
        Produced(
            topic,
            result.partition,
            result.offset,
            keys[index] if keys else None,
            values[index],
            tuple(headers[index]) if headers else (),
        )
        for index, result in enumerate(results)
    ]
