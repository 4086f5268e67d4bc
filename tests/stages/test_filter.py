"""Heuristic filters: every rule of the two published rule sets, just under and just over its threshold.

StarCoder2 (`filters/starcoder2_v1.yaml`, SC2 §2.1, REFERENCE c2) and StarCoder (`filters/starcoder_v1.yaml`,
bigcode-dataset `preprocessing/filtering.py` + `visual_inspection.csv`, REFERENCE c1). Each test crafts files
whose scores sit exactly at, just below or just above a threshold, while every other rule stays far from
firing, and checks kept vs removed with the exact reason.
"""

import json
import math
from pathlib import Path

import nbformat
import pyarrow as pa
import pytest
from helpers import stack_v2_layout
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from stackcurate.cli import main
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import FILE_SCHEMA
from stackcurate.query import run_query
from stackcurate.stages.filter import FilterConfig, FilterStage

FILTERS = Path(__file__).resolve().parents[2] / "filters"
SC2 = str(FILTERS / "starcoder2_v1.yaml")
SC1 = str(FILTERS / "starcoder_v1.yaml")
EXEMPT = ["HTML", "JSON", "Markdown", "Roff", "Roff Manpage", "SMT", "TeX", "Text", "XML"]

# Alpha-rich words that never form an encoded-data match: no word is 2 hex digits, none is 64+ characters.
WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "


def prose(n: int, width: int = 60) -> str:
    """Exactly `n` characters of words; with `width`, a newline ends every line of `width` characters."""
    flat = (WORDS * (n // len(WORDS) + 2))[:n]
    if not width:
        return flat
    return "".join("\n" if (i + 1) % (width + 1) == 0 else c for i, c in enumerate(flat))


def row(content: str, language: str = "Python", path: str | None = None, **extra: object) -> dict:
    ext = {"Python": "py", "Markdown": "md", "HTML": "html", "JSON": "json", "YAML": "yaml"}.get(language, "txt")
    path = path or f"/src/file.{ext}"
    name = path.rsplit("/", 1)[-1]
    return {
        "path": path,
        "content": content,
        "language": language,
        "extension": name.rsplit(".", 1)[-1] if "." in name else "",
        "is_generated": False,
        **extra,
    }


def table_of(rows: list[dict]) -> pa.Table:
    full = [
        {"doc_id": i, "source": "test", "length_bytes": len(r["content"].encode()), **r} for i, r in enumerate(rows)
    ]
    return pa.Table.from_pylist(full, schema=FILE_SCHEMA)


def run(rules: str, rows: list[dict], **cfg: object):
    return FilterStage(FilterConfig(rules=rules, **cfg))(table_of(rows))


def reasons(rules: str, rows: list[dict], **cfg: object) -> list[str | None]:
    """The drop reason of every row, in input order (None: kept)."""
    out = run(rules, rows, **cfg)
    got: dict[int, str | None] = dict.fromkeys(out.kept.column("doc_id").to_pylist())
    got.update(zip(out.removed.column("doc_id").to_pylist(), out.removed.column("reason").to_pylist(), strict=True))
    assert sorted(got) == list(range(len(rows)))
    return [got[i] for i in range(len(rows))]


def scores_of(rules: str, rows: list[dict], **cfg: object) -> list[dict]:
    """Every output row (kept or removed) as a dict, in input order."""
    out = run(rules, rows, **cfg)
    everything = out.kept.to_pylist() + out.removed.to_pylist()
    return sorted(everything, key=lambda r: r["doc_id"])


def code(n_lines: int = 20) -> str:
    """Ordinary, harmless Python."""
    return "".join(f"def lorem_{i}(ipsum):\n    return ipsum.dolor(sit=amet)\n" for i in range(n_lines // 2))


# ---------------------------------------------------------------------------------------------- StarCoder2


def test_sc2_too_many_lines():
    line = "lorem ipsum\n"
    assert reasons(SC2, [row(line * 100_000), row(line * 100_001)]) == [None, "too_many_lines"]


def test_sc2_too_many_lines_applies_to_exempt_and_data_languages_first():
    # The line count comes before every other rule, whatever the language.
    many = "lorem ipsum\n" * 100_001
    assert reasons(SC2, [row(many, "Markdown"), row(many, "JSON")]) == ["too_many_lines", "too_many_lines"]


def _long_line_file(longest: int) -> str:
    """One line of `longest` characters, then short lines enough to keep the mean under 100."""
    short = prose(40 * 30, width=39)  # 30 lines of 39 characters
    return prose(longest, width=0) + "\n" + short + "\n"


def test_sc2_max_line_length_python():
    assert reasons(SC2, [row(_long_line_file(1000)), row(_long_line_file(1001))]) == [None, "max_line_length"]


@pytest.mark.parametrize("language", EXEMPT)
def test_sc2_long_line_exempt_languages(language):
    path = "/README.txt" if language == "Text" else None  # Text must also pass the name allow-list
    rows = [
        row(prose(1001, width=0) + "\n", language, path),
        row(prose(100_000, width=0) + "\n", language, path),
        row(prose(100_001, width=0) + "\n", language, path),
        row(prose(150 * 10, width=149), language, path),  # mean line 150: no mean-line rule for them
    ]
    assert reasons(SC2, rows) == [None, None, "max_line_length_exempt", None]


def test_sc2_avg_line_length():
    at = "\n".join([prose(100, width=0)] * 10) + "\n"  # mean exactly 100
    over = "\n".join([prose(100, width=0)] * 9 + [prose(101, width=0)]) + "\n"  # mean 100.1
    way_over = prose(150 * 10, width=149)
    assert reasons(SC2, [row(at), row(over), row(way_over)]) == [None, "avg_line_length", "avg_line_length"]


PHRASES = [
    "auto-generated",
    "autogenerated",
    "automatically generated",
    "generated automatically",
    "this file is generated",
]


def _with_line(text: str, line_no: int) -> str:
    """Ordinary code with `# <text> by a tool` as line `line_no` (1-based)."""
    lines = code(20).splitlines()
    lines.insert(line_no - 1, f"# note: {text} by a tool")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("phrase", PHRASES)
def test_sc2_autogenerated_phrase_in_first_five_lines(phrase):
    rows = [row(_with_line(phrase, n)) for n in range(1, 7)]
    rows += [row(_with_line(phrase.upper(), 3)), row(_with_line(phrase.title(), 5))]
    assert reasons(SC2, rows) == ["autogenerated"] * 5 + [None] + ["autogenerated"] * 2


def test_sc2_autogenerated_flag_from_enry():
    rows = [row(code(), is_generated=True), row(code(), is_generated=False), row(code(), is_generated=None)]
    assert reasons(SC2, rows) == ["autogenerated", None, None]


def _char_mix(alpha_per_line: int, digits_per_line: int, lines: int = 25, width: int = 20) -> str:
    """`lines` lines of `width` characters (newline included): alpha letters, a space, digits, then ';'."""
    pad = width - 1 - alpha_per_line - 1 - digits_per_line
    assert pad >= 0
    line = "wxyz"[:alpha_per_line] + " " + "78901234"[:digits_per_line] + ";" * pad + "\n"
    return line * lines


def _tweak(text: str, old: str, new: str) -> str:
    """Replace the first occurrence only (one character more or less of a class in the whole file)."""
    return text.replace(old, new, 1)


def test_sc2_alpha_fraction():
    at = _char_mix(4, 0, width=16)  # 4 / 16 = 0.25 exactly
    under = _tweak(at, "wxyz", "wxy;")  # 99 / 400
    over = _tweak(at, "wxyz ;", "wxyzw;")  # 101 / 400
    got = scores_of(SC2, [row(at), row(under), row(over)])
    assert [r["alpha_fraction"] for r in got] == [0.25, 99 / 400, 101 / 400]
    assert [r.get("reason") for r in got] == [None, "alpha_fraction", None]


@pytest.mark.parametrize("language", ["Motorola 68K Assembly", "WebAssembly"])
def test_sc2_alphanumeric_instead_of_alpha(language):
    mostly_digits = _char_mix(4, 8)  # alpha 0.2, alnum 0.6
    at = _char_mix(4, 1)  # alnum 5 / 20 = 0.25 exactly
    under = _tweak(at, "wxyz", "wxy;")  # alnum 124 / 500
    got = scores_of(
        SC2, [row(mostly_digits, language), row(at, language), row(under, language), row(mostly_digits, "Python")]
    )
    assert got[0]["alpha_fraction"] == pytest.approx(0.2) and got[0]["alphanum_fraction"] == pytest.approx(0.6)
    assert got[2]["alphanum_fraction"] == 124 / 500
    assert [r.get("reason") for r in got] == [None, None, "alphanum_fraction", "alpha_fraction"]


B64 = "QWxhZGRpbjpvcGVuIHNlc2FtZQ0123456789+/abcdefghijklmnopqrstuvwxyzAB"  # 64 base64 characters


def _base64_run(n: int, width: int = 63) -> str:
    """A base64 run of exactly `n` characters (a newline, which the pattern includes, after every `width`)."""
    chars = (B64 * (n // len(B64) + 1))[:n]
    if not width:
        return chars
    return "".join("\n" if (i + 1) % (width + 1) == 0 else c for i, c in enumerate(chars))


def _hex_run(n_items: int, trailing_space: bool) -> str:
    """`0x1f` items separated by whitespace (a newline every 20); the whole run matches the hex pattern."""
    items = ["0x1f" + ("\n" if (i + 1) % 20 == 0 else " ") for i in range(n_items)]
    if not trailing_space:
        items[-1] = "0x1f"
    return "".join(items)


PAD = "".join(f"# {prose(58, width=0)};\n" for _ in range(40))  # 2,440 characters no pattern matches


def test_sc2_encoded_data_run_base64():
    def f(n: int) -> str:
        return f'DATA = "{_base64_run(n)}"\n' + PAD

    got = scores_of(SC2, [row(f(1024)), row(f(1025))])
    assert [r["encoded_max_match"] for r in got] == [1024, 1025]
    assert all(r["encoded_fraction"] <= 0.5 for r in got)
    assert [r.get("reason") for r in got] == [None, "encoded_data_run"]


def test_sc2_encoded_data_run_hex():
    at = "BYTES = [\n" + _hex_run(205, trailing_space=False) + ";\n]\n" + PAD  # 204 * 5 + 4 = 1024
    over = "BYTES = [\n" + _hex_run(205, trailing_space=True) + ";\n]\n" + PAD  # 205 * 5 = 1025
    got = scores_of(SC2, [row(at), row(over)])
    assert [r["encoded_max_match"] for r in got] == [1024, 1025]
    assert [r.get("reason") for r in got] == [None, "encoded_data_run"]


def test_sc2_encoded_data_run_unicode_escapes():
    # The pattern allows no whitespace, so the run is one long line: use a language exempt from line rules.
    def f(n: int) -> str:
        return 'title: "' + "\\u00e9" * n + '"\n' + PAD

    got = scores_of(SC2, [row(f(170), "Markdown"), row(f(171), "Markdown")])
    assert [r["encoded_max_match"] for r in got] == [1020, 1026]
    assert [r.get("reason") for r in got] == [None, "encoded_data_run"]


def test_sc2_encoded_data_fraction():
    runs = "".join(f'"{_base64_run(90, width=0)}"\n' for _ in range(10))  # 930 chars, 900 in runs
    at = runs + prose(870, width=58)  # 900 / 1800 = 0.5
    over = runs + prose(869, width=58)  # 900 / 1799
    got = scores_of(SC2, [row(at), row(over)])
    assert [r["encoded_fraction"] for r in got] == [0.5, 900 / 1799]
    assert [r.get("reason") for r in got] == [None, "encoded_data_fraction"]


def test_sc2_encoded_data_run_counts_single_matches_not_their_sum():
    # two 600-character runs: 1,200 characters covered, but no single match over 1024
    two = f'A = "{_base64_run(600)}"\nB = "{_base64_run(600)}"\n' + PAD
    one = f'A = "{_base64_run(80, width=0)}"\n' + PAD
    got = scores_of(SC2, [row(two), row(one)])
    assert [r["encoded_max_match"] for r in got] == [600, 80]
    assert [r.get("reason") for r in got] == [None, None]


def test_sc2_encoded_data_run_measures_each_pattern():
    # "0x1f\n" runs are base64 (1,024 characters, up to the first space) and hex; the hex match goes on
    # through " 0x1f 0x1f 0x1f": one hex match of 1,039 characters, so the file goes (SC2: any single match)
    run = "0x1f\n" * 204 + "0x1f" + " 0x1f 0x1f 0x1f"
    assert len(run) == 1039
    text = "BYTES = [" + run + "]\n" + PAD
    got = scores_of(SC2, [row(text)])[0]
    assert got["encoded_max_match"] == 1039
    assert got.get("reason") == "encoded_data_run"


def test_sc2_encoded_data_run_override_below_the_exact_bound():
    two = f'A = "{_base64_run(80, width=0)}"\nB = "{_base64_run(80, width=0)}"\n' + PAD  # two 80-char runs
    assert reasons(SC2, [row(two)], overrides=("encoded_data_run=100",)) == [None]


@pytest.mark.parametrize(
    ("language", "path"),
    [
        ("Text", "/requirements.txt"),
        ("JSON", "/data.json"),
        ("YAML", "/conf.yaml"),
        ("Web Ontology Language", "/onto.owl"),
        ("Graphviz (DOT)", "/graph.dot"),
    ],
)
def test_sc2_data_max_lines(language, path):
    line = "lorem ipsum dolor\n"
    assert reasons(SC2, [row(line * 512, language, path), row(line * 513, language, path)]) == [
        None,
        "data_max_lines",
    ]


def test_sc2_data_max_lines_not_for_code():
    line = "lorem ipsum dolor\n"
    assert reasons(SC2, [row(line * 513), row(line * 5000, "Markdown")]) == [None, None]


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/notes.txt", True),
        ("/docs/README", True),
        ("/requirements-dev.txt", True),
        ("/ci/REQUIREMENTS.TXT", True),
        ("/CMakeLists.txt", True),
        ("/TODO", True),
        ("/DESCRIPTION.txt", True),
        ("/random.txt", False),
        ("/data/readme_old.txt", False),
        ("/notes/words.txt", False),  # the file name counts, not the folder
    ],
)
def test_sc2_text_name_allow_list(path, allowed):
    assert reasons(SC2, [row(prose(300), "Text", path)]) == [None if allowed else "text_name_not_allowed"]


def test_sc2_text_name_rule_only_for_text():
    assert reasons(SC2, [row(prose(300), "Markdown", "/random.md")]) == [None]


def _html(visible: int, hidden: int, hidden_tag: str = "script") -> str:
    """A page whose visible text is `visible` characters and whose total length is visible + hidden + 24
    (for <script>/<style>: "<p>" + "</p>" + "<script>" + "</script>" is 24 characters)."""
    return f"<p>{prose(visible, width=59)}</p><{hidden_tag}>{prose(hidden, width=59)}</{hidden_tag}>"


@pytest.mark.parametrize("rules", [SC2, SC1])
def test_html_visible_fraction(rules):
    at = _html(150, 576)  # 150 / 750 = 0.2: removed (kept only if > 0.2)
    over = _html(150, 575)  # 150 / 749
    assert len(at) == 750
    got = scores_of(rules, [row(at, "HTML"), row(over, "HTML")])
    assert [r["html_visible_fraction"] for r in got] == [0.2, 150 / 749]
    assert [r["html_visible_chars"] for r in got] == [150, 150]
    assert [r.get("reason") for r in got] == ["html_visible_fraction", None]


@pytest.mark.parametrize("rules", [SC2, SC1])
def test_html_visible_chars(rules):
    got = scores_of(rules, [row(_html(100, 0), "HTML"), row(_html(101, 0), "HTML")])
    assert [r["html_visible_chars"] for r in got] == [100, 101]
    assert [r.get("reason") for r in got] == ["html_visible_chars", None]


@pytest.mark.parametrize("rules", [SC2, SC1])
def test_html_script_and_style_are_not_visible(rules):
    rows = [
        row(_html(150, 2000, "script"), "HTML"),
        row(_html(150, 2000, "style"), "HTML"),
        row(_html(150, 2000, "div"), "HTML"),  # the same text in a visible tag counts
    ]
    assert reasons(rules, rows) == ["html_visible_fraction", "html_visible_fraction", None]


@pytest.mark.parametrize("rules", [SC2, SC1])
def test_html_parse_error(rules):
    page = f"<p>{prose(400, width=59)}</p><![ if ]]>"  # html.parser rejects a marked section without a name
    got = scores_of(rules, [row(page, "HTML")])[0]
    assert math.isnan(got["html_visible_fraction"]) and math.isnan(got["html_visible_chars"])
    assert got["reason"] == "html_parse_error"


def test_override_null_turns_off_the_parse_error_rule():
    page = f"<p>{prose(400, width=59)}</p><![ if ]]>"
    assert reasons(SC2, [row(page, "HTML")], overrides=("html_parse_error=null",)) == [None]


def test_html_rules_only_for_html():
    assert reasons(SC2, [row(_html(100, 0), "Markdown")]) == [None]


def test_scores_are_float_columns():
    out = run(SC2, [row("ab\ncdef\n"), row(prose(300), "Text", "/random.txt")])
    for name in (
        "num_lines",
        "max_line_length",
        "avg_line_length",
        "alpha_fraction",
        "alphanum_fraction",
        "encoded_fraction",
        "encoded_max_match",
        "autogenerated",
        "html_visible_fraction",
        "name_allowed",
    ):
        assert out.kept.schema.field(name).type == pa.float64(), name
        assert out.removed.schema.field(name).type == pa.float64(), name
    kept = out.kept.to_pylist()[0]
    assert (kept["num_lines"], kept["max_line_length"], kept["avg_line_length"]) == (2, 4, 3)
    assert kept["alpha_fraction"] == kept["alphanum_fraction"] == 6 / 8
    assert (kept["encoded_fraction"], kept["encoded_max_match"], kept["autogenerated"]) == (0, 0, 0)
    # scores of rules that do not concern the row are not computed
    assert math.isnan(kept["html_visible_fraction"]) and math.isnan(kept["name_allowed"])
    assert kept["notebook_script"] is None and kept["notebook_cells"] is None
    removed = out.removed.to_pylist()[0]
    assert removed["reason"] == "text_name_not_allowed" and removed["name_allowed"] == 0


def test_scores_non_ascii_follow_python_str_methods():
    text = "é1_ ü\n"  # isalpha: é ü; isalnum: é 1 ü
    got = scores_of(SC2, [row(text * 50)])[0]
    assert got["alpha_fraction"] == pytest.approx(2 / 6)
    assert got["alphanum_fraction"] == pytest.approx(3 / 6)


def test_first_rule_in_order_is_the_reason():
    # a long line, low alpha and an auto-generated header: max_line_length comes first
    text = "# auto-generated\n" + ";" * 2000 + "\n"
    assert reasons(SC2, [row(text)]) == ["max_line_length"]


def test_overrides():
    long_line = _long_line_file(1500)
    low_alpha = _char_mix(2, 0, width=16)
    assert reasons(SC2, [row(long_line), row(low_alpha)]) == ["max_line_length", "alpha_fraction"]
    assert reasons(SC2, [row(long_line)], overrides=("max_line_length=2000",)) == [None]
    assert reasons(SC2, [row(low_alpha)], overrides=("alpha_fraction=null",)) == [None]
    assert reasons(SC2, [row(low_alpha)], overrides=("alpha_fraction=0.1",)) == [None]
    assert reasons(SC1, [row(long_line, path="/a.py")], overrides=("max_line_length=2000",)) == [None]


@pytest.mark.parametrize("pair", ["no_such_rule=3", "max_line_length", "max_line_length=lots"])
def test_bad_overrides_raise(pair):
    with pytest.raises(StackcurateError):
        FilterStage(FilterConfig(rules=SC2, overrides=(pair,)))


def test_missing_rule_set_raises(tmp_path):
    with pytest.raises(StackcurateError):
        FilterStage(FilterConfig())
    with pytest.raises(StackcurateError):
        FilterStage(FilterConfig(rules=str(tmp_path / "nope.yaml")))


def _notebook() -> str:
    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    image = "iVBORw0KGgo" + "QUFB" * 1000  # a 4 kB base64 PNG: the notebook's JSON fails encoded_data_run
    nb.cells = [
        new_markdown_cell("# Lorem ipsum\nDolor sit amet."),
        new_code_cell(
            "total = sum(range(4))\nprint(total)",
            outputs=[
                new_output("stream", name="stdout", text="6\n"),
                new_output("display_data", data={"image/png": image, "text/plain": "<Figure>"}),
            ],
        ),
    ]
    return nbformat.writes(nb)


def test_notebook_is_judged_as_its_script():
    content = _notebook()
    nb_row = row(content, "Jupyter Notebook", "/nb/analysis.ipynb")
    out = run(SC2, [nb_row])
    assert out.removed.num_rows == 0
    got = out.kept.to_pylist()[0]
    assert "total = sum(range(4))" in got["notebook_script"] and "iVBOR" not in got["notebook_script"]
    assert got["notebook_language"] == "python"
    assert got["content"] == content  # the original JSON is kept
    assert [c["cell_type"] for c in got["notebook_cells"]] == ["markdown", "code"]
    assert got["notebook_cells"][0]["source"] == "# Lorem ipsum\nDolor sit amet."
    assert got["notebook_cells"][1]["source"] == "total = sum(range(4))\nprint(total)"
    assert got["notebook_cells"][1]["output"] == "6\n<Figure>"
    # judged as JSON text, the same file goes
    assert reasons(SC2, [nb_row], notebooks=False) == ["max_line_length"]


def test_broken_notebook_is_removed():
    rows = [
        row('{"cells": [', "Jupyter Notebook", "/nb/broken.ipynb"),
        row(json.dumps({"just": "json"}), "JSON", "/nb/other.ipynb"),  # .ipynb by name, not a notebook
    ]
    out = run(SC2, rows)
    assert out.kept.num_rows == 0
    assert out.removed.column("reason").to_pylist() == ["notebook_unreadable"] * 2
    assert all(d and d.startswith("not a notebook") for d in out.removed.column("detail").to_pylist())


def test_other_files_get_null_notebook_columns():
    got = run(SC2, [row(code())]).kept.to_pylist()[0]
    assert got["notebook_script"] is None and got["notebook_language"] is None and got["notebook_cells"] is None


# ----------------------------------------------------------------------------------------------- StarCoder


def sc1_row(content: str, ext: str, language: str | None = None, name: str = "file") -> dict:
    return row(content, language or "Python", f"/src/{name}.{ext}" if ext else f"/src/{name}")


def test_sc1_max_line_length_python():
    rows = [sc1_row(_long_line_file(1000), "py"), sc1_row(_long_line_file(1001), "py")]
    assert reasons(SC1, rows) == [None, "max_line_length"]


def test_sc1_per_extension_long_line_threshold():
    # glsl .fsh has 500; markdown and tex say "remove" (no max-line and no mean-line rule)
    rows = [
        sc1_row(_long_line_file(500), "fsh", "GLSL"),
        sc1_row(_long_line_file(501), "fsh", "GLSL"),
        sc1_row(_long_line_file(5000), "md", "Markdown"),
        sc1_row(_long_line_file(5000), "tex", "TeX"),
    ]
    assert reasons(SC1, rows) == [None, "max_line_length", None, None]


def test_sc1_avg_line_length_only_where_a_long_line_threshold_is_set():
    at = "\n".join([prose(100, width=0)] * 10) + "\n"
    over = "\n".join([prose(101, width=0)] * 10) + "\n"
    avg150 = prose(150 * 10, width=149)
    rows = [
        sc1_row(at, "py"),
        sc1_row(over, "py"),
        sc1_row(avg150, "fsh", "GLSL"),  # threshold 500: the mean rule (100) is on
        sc1_row(avg150, "md", "Markdown"),  # "remove"
        sc1_row(avg150, "markdown", "Markdown"),
        sc1_row(avg150, "asm", "Assembly"),  # free-text cell
        sc1_row(avg150, "ma", "Mathematica"),  # empty cell
    ]
    assert reasons(SC1, rows) == [None, "avg_line_length", "avg_line_length", None, None, None, None]


def test_sc1_alphanum_fraction():
    at = _char_mix(4, 1)  # 0.25
    under = _tweak(at, "wxyz", "wxy;")  # 124 / 500
    rows = [sc1_row(at, "py"), sc1_row(under, "py"), sc1_row(under, "sas", "SAS")]  # sas: "remove"
    assert reasons(SC1, rows) == [None, "alphanum_fraction", None]


def test_sc1_alpha_filter_column():
    # scheme (.scm) has an alpha threshold of 0.25 besides the alphanumeric one; python has none
    mostly_digits = _char_mix(4, 8)  # alpha 0.2, alnum 0.6
    at = _char_mix(4, 8, width=16)  # alpha 4 / 16 = 0.25
    rows = [
        sc1_row(mostly_digits, "scm", "Scheme"),
        sc1_row(at, "scm", "Scheme"),
        sc1_row(mostly_digits, "py"),
        sc1_row(mostly_digits, "asm", "Assembly"),  # Alpha filter "remove": off
    ]
    assert reasons(SC1, rows) == ["alpha_fraction", None, None, None]


def _json(n_chars: int) -> str:
    """A JSON document of exactly `n_chars` characters, on one line."""
    doc = '{"k": "' + prose(n_chars - 10, width=0) + '"}\n'
    assert len(doc) == n_chars
    return doc


def _yaml(n_chars: int) -> str:
    text = ("key: " + prose(n_chars, width=70).replace("\n", "\nkey: "))[:n_chars]
    assert len(text) == n_chars
    return text


def test_sc1_json_alpha_filter():
    # json rows: alpha threshold 0.5; no long-line threshold
    half = "wxyzwxyz 7890;;\n" * 10  # 8 / 16 = 0.5
    under = _tweak(half, "wxyzwxyz", "wxyzwxy;")  # 79 / 160
    rows = [
        sc1_row(half, "json", "JSON"),
        sc1_row(under, "json", "JSON"),
        sc1_row(under, "yml", "YAML"),
        sc1_row(_json(3000), "json", "JSON"),  # one 3,000-char line is fine
    ]
    got = scores_of(SC1, rows)
    assert [r["alpha_fraction"] for r in got[:2]] == [0.5, 79 / 160]
    assert [r.get("reason") for r in got] == [None, "alpha_fraction", "alpha_fraction", None]


@pytest.mark.parametrize(("ext", "language"), [("json", "JSON"), ("yaml", "YAML"), ("yml", "YAML")])
def test_sc1_json_yaml_size(ext, language):
    make = _json if ext == "json" else _yaml
    rows = [sc1_row(make(n), ext, language) for n in (99, 100, 5000, 5001)]
    assert reasons(SC1, rows) == ["data_too_small", None, None, "data_too_large"]


def test_sc1_size_rule_only_for_json_yaml():
    assert reasons(SC1, [sc1_row("def f():\n    return g\n", "py")]) == [None]


def test_sc1_extension_selection():
    ok = code()
    rows = [
        sc1_row(ok, "py"),
        sc1_row(ok, "bison", "Bison"),  # Include = 0
        sc1_row(ok, "cats", "C"),  # Include = 0
        sc1_row(ok, "rkt", "Racket"),  # Include empty: excluded, as upstream
        sc1_row(ok, "xyz", "Python"),  # not in the table
        sc1_row(ok, "", "Python", name="script"),  # no extension, (python, "") not in the table
        sc1_row(ok, "PY"),  # compared lower-cased (documented deviation)
    ]
    assert reasons(SC1, rows) == [
        None,
        "extension_not_selected",
        "extension_not_selected",
        "extension_not_selected",
        "extension_not_selected",
        "extension_not_selected",
        None,
    ]


def test_sc1_language_comes_from_the_extension():
    # enry may say C++ for a .h file; StarCoder's languages were assigned by extension: (c, h) is included
    header = "#include <vector>\nclass Lorem { std::vector<int> ipsum; };\n" * 3
    rows = [sc1_row(header, "h", "C++"), sc1_row(header, "hpp", "C++"), sc1_row(header, "h", "C")]
    assert reasons(SC1, rows) == [None, None, None]


def test_sc1_extensionless_files_use_the_enry_language():
    # "" is listed under dockerfile and makefile: the enry language picks the row
    rows = [
        row("FROM debian:12\nRUN lorem ipsum dolor\n", "Dockerfile", "/Dockerfile"),
        row("all:\n\techo lorem ipsum\n", "Makefile", "/Makefile"),
        row("lorem ipsum dolor sit\n", "Text", "/LICENSE"),
    ]
    assert reasons(SC1, rows) == [None, None, "extension_not_selected"]


def _xml_at(pos: int, total: int = 400) -> str:
    head = '<?xml version="1.0"?>'
    text = prose(pos, width=50) + head + "\n" + prose(total, width=50) + "\n"
    assert text.index("<?xml version=") == pos
    return text


def test_sc1_xml_header():
    rows = [
        sc1_row(_xml_at(0), "py"),
        sc1_row(_xml_at(86), "py"),  # "<?xml version=" ends at character 100
        sc1_row(_xml_at(87), "py"),  # ends at 101: not in the first 100
        sc1_row(_xml_at(150), "py"),
        sc1_row(_xml_at(0), "xsl", "XSLT"),
        sc1_row(_xml_at(0), "xslt", "XSLT"),
        sc1_row(_xml_at(0), "xhtml", "HTML"),
    ]
    assert reasons(SC1, rows) == ["xml_header", "xml_header", None, None, None, None, "xml_header"]


def test_sc2_has_no_xml_or_size_rule():
    assert reasons(SC2, [row(_xml_at(0), "Python"), row('{"lorem": "ipsum"}\n', "JSON", "/a.json")]) == [None, None]


def test_sc1_language_aliases():
    # extension-less lookup by enry name needs BigCode's spelling; the aliases map enry names to it
    stage = FilterStage(FilterConfig(rules=SC1))
    assert stage.rules.language_key("C#") == "c-sharp"
    assert stage.rules.language_key("F#") == "f-sharp"
    assert stage.rules.language_key("Common Lisp") == "common-lisp"
    assert stage.rules.language_key("Visual Basic .NET") == "visual-basic"


# --------------------------------------------------------------------------------------- through the runner


def test_bytes_removed_per_rule_and_language_in_stats(tmp_path):
    files = [
        ("/src/app.py", code(40).encode()),
        ("/src/wide.py", _long_line_file(1500).encode()),
        ("/src/gen.py", ("# This file is generated by a tool\n" + code()).encode()),
        ("/src/gen2.py", ("# AUTOGENERATED\n" + code(30)).encode()),
        ("/data/big.json", ('"lorem ipsum",\n' * 600).encode()),
        ("/notes/random.txt", prose(500).encode()),
        ("/README.md", prose(800).encode()),
    ]
    stack_v2_layout(tmp_path / "store", files)
    out = str(tmp_path / "out")
    common = ["--out", out, "--runner", "local", "--no-progress"]
    store = ["--metadata", str(tmp_path / "store/metadata/*.parquet"), "--content", str(tmp_path / "store")]
    assert main(["ingest", *common, *store]) == 0
    assert main(["language", *common, "--input", f"{out}/ingest"]) == 0
    assert main(["filter", *common, "--rules", SC2]) == 0

    got = run_query(
        out,
        "select reason, language, sum(value) from stats where stage='filter' and metric='bytes_removed' group by all",
    ).fetchall()
    size = {p: len(b) for p, b in files}
    expected = {
        ("max_line_length", "Python"): size["/src/wide.py"],
        ("autogenerated", "Python"): size["/src/gen.py"] + size["/src/gen2.py"],
        ("data_max_lines", "JSON"): size["/data/big.json"],
        ("text_name_not_allowed", "Text"): size["/notes/random.txt"],
    }
    assert {(r, lang): v for r, lang, v in got} == expected
    removed_sql = "select reason, language, sum(length_bytes) from filter_removed group by all"
    from_rows = run_query(out, removed_sql).fetchall()
    assert {(r, lang): v for r, lang, v in from_rows} == expected
    kept = run_query(out, "select path from filter order by path").fetchall()
    assert [p for (p,) in kept] == ["/README.md", "/src/app.py"]
