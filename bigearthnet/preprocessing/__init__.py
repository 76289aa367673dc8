"""BigEarthNet v1/v2 archives -> HDF5 shards: reading patches (GeoTIFF bands, labels),
resampling to one grid, the official splits, planning and writing the shards."""
