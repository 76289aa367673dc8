"""Land-cover maps from a trained model: one pixel per patch of an archive or shards, whole
Sentinel-2 scenes in sliding windows, change between two dates, PNG previews."""
