"""Published ResNet weights (reBEN, SSL4EO-S12, timm, torchvision) into this project's models:
reading state dicts (:mod:`.state_dict`), what each source takes (:mod:`.sources`), the
layer-by-layer conversion (:mod:`.convert`), the import (:mod:`.importer`) and a published
classifier as a run folder (:mod:`.published_run`). See docs/weights.md."""
