"""Known errors become one line and an exit status; a full disk is told apart from other OS errors."""

import errno

import pytest

from stackcurate.core.errors import StackcurateError, exit_code, is_disk_full


def _raise(exc: BaseException):
    def action():
        raise exc

    return action


@pytest.mark.parametrize(
    ("exc", "full"),
    [
        (OSError(errno.ENOSPC, "x"), True),
        (OSError(errno.EDQUOT, "x"), True),
        (OSError("IOError: No space left on device"), True),
        (OSError(errno.EACCES, "Permission denied"), False),
        (ValueError("No space left on device"), False),
    ],
)
def test_is_disk_full(exc, full):
    assert is_disk_full(exc) is full


def test_a_known_error_is_one_line_and_status_2(capsys, monkeypatch):
    monkeypatch.delenv("STACKCURATE_DEBUG", raising=False)
    assert exit_code(_raise(StackcurateError("no input; pass --input"))) == 2
    assert capsys.readouterr().err == "stackcurate: error: no input; pass --input\n"


def test_debug_shows_the_traceback_of_a_known_error(monkeypatch):
    monkeypatch.setenv("STACKCURATE_DEBUG", "1")
    with pytest.raises(StackcurateError):
        exit_code(_raise(StackcurateError("x")))


def test_a_full_disk_is_one_line_naming_the_file(capsys, monkeypatch):
    monkeypatch.delenv("STACKCURATE_DEBUG", raising=False)
    assert exit_code(_raise(OSError(errno.ENOSPC, "No space left on device", "/out/x.parquet"))) == 2
    assert capsys.readouterr().err.startswith("stackcurate: error: no space left on device (/out/x.parquet); ")


def test_another_os_error_is_not_hidden():
    with pytest.raises(PermissionError):
        exit_code(_raise(PermissionError(errno.EACCES, "denied")))


def test_an_interrupt_says_how_to_go_on_and_is_status_130(capsys):
    assert exit_code(_raise(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err == "stackcurate: interrupted; rerun the same command to resume\n"


def test_a_finished_action_is_status_0():
    assert exit_code(lambda: None) == 0
