"""The real ZooKeeper the cluster tests run: the same one ``strom cluster up`` starts."""

from strom.cli.local_zookeeper import ZooKeeperMissingError, ZooKeeperServer, ZooKeeperStartError, free_port

__all__ = ["ZooKeeperMissingError", "ZooKeeperServer", "ZooKeeperStartError", "free_port"]
