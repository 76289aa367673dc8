"""``bigearthnet-map scene``: one Sentinel-2 scene -> a land-cover map. :mod:`.options` (how a
scene is mapped, free of TensorFlow), :mod:`.input` (the scene read by strips: bands,
offsets, nodata, clouds), :mod:`.windows` (windows through the model, probabilities summed per
cell), :mod:`.output` (the map and its companions), :mod:`.mapping` (the whole, and what made
a map: its tags)."""
