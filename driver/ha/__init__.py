"""High availability: the lease in Kafka, the leader's takeover and fencing, the
standby's tracker tail, and the gate every output operation passes.
"""
