"""A tiny, learnable BigEarthNet-like archive (v1 or v2 layout) and Sentinel-2 scenes, written
by the project's own generator for the demo and the tests."""
