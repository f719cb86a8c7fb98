"""The ReceiverTracker: launching and relaunching receivers as Spark tasks, and the
gRPC endpoint they register and report blocks to (its commands, scheduling, stream
binding, authentication and limits).
"""
