"""Self-contained HTML pages (one file, no network: inline CSS, inline SVG figures)."""
