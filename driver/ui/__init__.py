"""What a running driver shows: the status page and its server, and the metrics behind
/api/status and /metrics.
"""
