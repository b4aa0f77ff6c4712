"""Figures for Prefect artifacts: matplotlib off-screen, PNG inlined into markdown.

Inline data URIs because a markdown artifact is all the Prefect UI shows: there is no
file server for images beside it.
"""
from __future__ import annotations

import base64
import io


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # workers have no display
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    pyplot().close(fig)
    return buf.getvalue()


def markdown_image(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"
