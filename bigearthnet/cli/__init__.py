"""The commands: each module parses its options, sets up, and calls the package.

``common`` holds the one convention they share (parser, error printer, exit codes); the
console scripts of ``setup.cfg`` point at the ``main`` of each module, and the root
``train.py`` / ``evaluate.py`` are shims over :mod:`bigearthnet.cli.train` and
:mod:`bigearthnet.cli.evaluate`.
"""
