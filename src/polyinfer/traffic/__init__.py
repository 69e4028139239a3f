"""Traffic: trace files, synthetic workloads and the server's recordings -> Trace -> WorkloadProfile,
and the drift score that says when traffic has moved away from what an artifact was tuned for."""
