"""A broker of a cluster: the event loop's side of ``strom.cluster`` (see ``runtime``).

``runtime`` (``ClusterReplication``: the ``Replication`` of a broker of a cluster), ``partitions``
(this broker's role for each partition it replicates and the data path), ``fetcher`` (followers
copying from leaders), ``senders`` (the controller's commands to brokers), ``peer`` (a connection
to another broker). The pure cores they drive are in ``strom.cluster``.
"""
