"""The DStream API: StreamingContext, DStream and its kinds, the DStream graph and its
pickled form, the input streams, and recovery (getOrCreate) beside the context, as
Spark keeps its Checkpoint.
"""
