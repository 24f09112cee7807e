"""A randomized history checker for txnlog, in the spirit of Jepsen's Kafka workload.

``workload`` generates seeded histories (producers, consumers, snapshot reads, consume-transform-produce) while
injecting faults; ``checker`` looks for anomalies in them; ``run`` is the command line.
"""
