"""Studies and controllers around training that run on a login node (no TensorFlow, no
Horovod): the batch-size study, the elastic controller and its noise-scale policy."""
