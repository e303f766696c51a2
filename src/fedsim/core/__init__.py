"""The simulator: a run's settings, its round loop (train), the local SGD engines and compiled kernels,
the metrics, checkpoints, signals and the run's files on disk."""
