"""The project's file formats, one writer and one reader each: HDF5 shards and their
manifest, checkpoints and their pointers, the training history."""
