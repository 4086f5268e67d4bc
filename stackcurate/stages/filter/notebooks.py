"""Jupyter notebooks to scripts and to structured cells, as StarCoder2 used them (SC2 §2.4).

`jupytext` writes the script in the kernel's language; the structured form keeps each cell's type, source and
text output (stream text, and the `text/plain` of results), so the formatting stage can build the
`<jupyter_text>` / `<jupyter_code>` / `<jupyter_output>` sequence.
"""

from dataclasses import dataclass

CELL_FIELDS = ("cell_type", "source", "output")


@dataclass(frozen=True)
class Notebook:
    script: str
    language: str
    cells: list[dict[str, str]]


def _output_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out.get("text", "")))
        elif "data" in out and "text/plain" in out["data"]:
            parts.append("".join(out["data"]["text/plain"]))
    return "".join(parts)


def convert(content: str) -> Notebook:
    """Parse a notebook; raises ValueError (with the parser's reason) when it is not a readable notebook."""
    import jupytext
    import nbformat

    try:
        nb = nbformat.reads(content, as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat raises JSON, validation and version errors alike
        raise ValueError(f"not a notebook: {str(exc).splitlines()[0][:200]}") from None
    meta = nb.get("metadata", {})
    language = (
        meta.get("kernelspec", {}).get("language") or meta.get("language_info", {}).get("name") or "python"
    ).lower()
    extension = {
        "python": ".py",
        "r": ".R",
        "julia": ".jl",
        "scala": ".scala",
        "c++": ".cpp",
        "javascript": ".js",
        "typescript": ".ts",
        "java": ".java",
        "bash": ".sh",
        "sql": ".sql",
        "matlab": ".m",
        "rust": ".rs",
        "go": ".go",
        "ruby": ".rb",
        "kotlin": ".kt",
        "csharp": ".cs",
        "c#": ".cs",
    }.get(language, ".py")
    try:
        script = jupytext.writes(nb, fmt=extension[1:])
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"jupytext could not convert it: {str(exc).splitlines()[0][:200]}") from None
    cells = [
        {"cell_type": c.get("cell_type", ""), "source": "".join(c.get("source", "")), "output": _output_text(c)}
        for c in nb.get("cells", [])
    ]
    return Notebook(script=script, language=language, cells=cells)
