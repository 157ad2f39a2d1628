"""Software pipelining of partitioned IR.

Will own modulo-schedule expansion (prologue / steady state / epilogue), coarse T/C/U pipelining,
fine-grained MMA issue depth and channel-depth selection.
"""
