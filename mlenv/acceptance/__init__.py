"""The acceptance workload: checks, verdict and reports (torch/deepspeed imported lazily)."""
