"""``bigearthnet-export``: a trained run's model as files that leave the run folder."""
