"""The cluster: brokers coordinated through ZooKeeper, replicated partitions.

Pure cores (no asyncio, no sockets, no ZooKeeper client; events in, actions out):
``controller`` (who leads), ``replica`` (a partition's ISR, high watermark, acks=all, truncation),
``broker_control`` / ``metadata_image`` (a broker's side of the controller's commands),
``placement`` / ``election`` (the rules), ``znodes`` (the ZooKeeper layout), ``wire`` (the
commands as protocol messages). The shell: ``zookeeper`` (strom's operations over a ``ZkStore``),
``controller_driver`` (the controller's loop against ZooKeeper), ``kazoo_store`` (the only module
importing kazoo) and ``memory_zookeeper`` (an in-memory stand-in for tests). See docs/cluster.md.
"""
