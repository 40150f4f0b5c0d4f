"""strom's web console: cluster, topics, messages and consumer groups in a browser.

Server-rendered HTML (``pages``) over a small asyncio HTTP server (``http``); everything it shows
comes from a cluster through ``source.ClusterSource`` (strom's admin client and a consumer, so any
Kafka-compatible cluster works). ``strom console`` runs it standalone; ``strom broker
--console-port`` runs it beside a broker (``server.BrokerConsole``). docs/console.md.
"""
