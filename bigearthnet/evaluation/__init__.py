"""Scoring a trained run on a split over all ranks: metrics from counts or gathered scores,
the report files and plots."""
