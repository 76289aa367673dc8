"""Feeding the training step: a rank's part of a split (``RankData``), where it is cached,
how an epoch is cut into batches, augmentation and normalisation."""
