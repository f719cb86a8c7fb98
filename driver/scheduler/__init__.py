"""Spark's streaming scheduler: the JobGenerator (a batch per interval), the
JobScheduler (runs the output operations), the ReceivedBlockTracker and the events
it logs to the driver WAL, the listener bus and rate control.
"""
