"""Data-parallel training: the replica (model, optimizer, steps), the one epoch driver
shared by fixed-size and elastic runs, optimizers, schedules, the gradient noise scale, and
what rank 0 writes into the run folder."""
