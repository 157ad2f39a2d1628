"""What aref knows about the hardware it compiles for: the machine models (`machine`: units, latencies,
bandwidths, fitted figures from `calibration/`)."""
