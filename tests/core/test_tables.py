"""Name lists under filters/: comments and blanks skipped, bad lines named by file and line."""

import pytest

from stackcurate.core.errors import StackcurateError
from stackcurate.core.tables import read_name_list


def test_a_name_list_skips_comments_and_blank_lines(tmp_path):
    path = tmp_path / "names.txt"
    path.write_text("# licenses\nMIT\n\n  Apache-2.0  \n")
    assert read_name_list(path) == ("MIT", "Apache-2.0")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("MIT\nnope\n", "{path}:2: unknown license 'nope'"),
        ("MIT\nMIT\n", "{path}:2: license 'MIT' is listed twice"),
        ("# only comments\n\n", "{path} lists no license"),
        (None, "license list {path} does not exist"),
    ],
)
def test_a_bad_name_list_is_a_one_line_error_naming_file_and_line(tmp_path, text, message):
    path = tmp_path / "names.txt"
    if text is not None:
        path.write_text(text)
    with pytest.raises(StackcurateError) as exc:
        read_name_list(path, is_valid=lambda name: name != "nope", what="license")
    assert str(exc.value) == message.format(path=path)
