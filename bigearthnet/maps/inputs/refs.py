"""What a scene's names point at, decided in one place.

* ``FILE#ID`` names the item ``ID`` of a saved search ``FILE``; but ``#`` is also a legal
  character of folder and file names (``H#2/scene.SAFE``). :func:`split_ref` decides by
  what exists: a path that exists is that path, whatever ``#`` it holds; otherwise the split
  is at the last ``#`` whose left part is an existing ``.json`` file.
* A relative href is joined to the folder of the JSON file it was read from, as a path
  (:func:`absolute_href`: pystac would parse that folder as a URL, and a ``#`` in its name
  would end it).
* An asset's href is a local file when it is a path or a ``file://`` URL (RFC 8089:
  ``file:///data/b02.tif``, ``file://localhost/...``, percent-encoded); any other URL
  (``https://``, ``s3://``) and GDAL's virtual paths (``/vsicurl/...``) are remote.
  :func:`local_path` is what the ``--out`` overlap check, the scene's identity digest and
  the band reader all ask.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

REF = "#"  # FILE#ID: an item of a collection file
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_LOCAL_HOSTS = ("", "localhost")


def split_ref(ref: str | Path) -> tuple[Path, str | None]:
    """(the file, the item id) of ``FILE#ID``; (the path, None) of any other scene."""
    text = str(ref)
    whole = Path(text)
    if REF not in text or whole.exists():
        return whole, None
    cuts = [at for at, char in enumerate(text) if char == REF]
    for at in reversed(cuts):
        left = Path(text[:at])
        if left.suffix.lower() == ".json" and left.is_file():
            return left, text[at + 1 :]
    return whole, None


def absolute_href(href: str, document: Path) -> str:
    """``href`` as read from the JSON file ``document`` (absolute): a relative path joined to
    that file's folder, a URL or an absolute path as it is."""
    if _SCHEME.match(href) or href.startswith("/"):
        return href
    return os.path.normpath(document.parent / href)


def local_path(href: str) -> Path | None:
    """The local file ``href`` names (a path, or a ``file://`` URL of this host); None for a
    URL of another scheme or host, or a GDAL virtual path."""
    if href.startswith("/vsi"):
        return None
    if not _SCHEME.match(href):
        return Path(href)
    parts = urlsplit(href)
    if parts.scheme.lower() != "file" or parts.netloc.lower() not in _LOCAL_HOSTS:
        return None
    return Path(unquote(parts.path))


def openable(href: str) -> str:
    """What to hand GDAL for ``href``: the local path of a ``file://`` URL (GDAL neither
    decodes ``%20`` nor knows ``localhost``), any other href as it is."""
    path = local_path(href)
    return str(path) if path is not None else href
