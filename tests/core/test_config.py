"""Stage configs: fields declared with option(), built from YAML or flags, with one-line errors."""

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from stackcurate.core.config import (
    add_flags,
    build_config,
    dump_yaml,
    flag_values,
    option,
    output_settings,
    read_yaml,
    resolve_paths,
    to_dict,
)
from stackcurate.core.errors import StackcurateError


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """A config with a field of every kind."""

    batch_rows: int = option(1000, "rows per table")
    threshold: float = option(0.5, "cutoff")
    verbose: bool = option(False, "say more")
    label: str | None = option(None, "a label")
    languages: tuple[str, ...] = option(("python",), "languages to keep")
    rules: str = option("rules.yaml", "rules table", path=True, keywords=("auto",))
    tables: tuple[str, ...] = option((), "more tables", path=True)
    threads: int = option(4, "threads (default: one per core)", output=False)

    def __post_init__(self) -> None:
        if self.batch_rows <= 0:
            raise ValueError("batch_rows must be positive")


def test_option_carries_help_and_flags_into_the_field():
    field = DemoConfig.__dataclass_fields__["rules"]
    assert dict(field.metadata) == {
        "help": "rules table", "path": True, "keywords": ("auto",), "output": True, "resolve": None,
    }  # fmt: skip
    assert DemoConfig().rules == "rules.yaml"


def test_build_config_coerces_values_to_the_field_types():
    cfg = build_config(
        DemoConfig, {"batch_rows": "2_000", "threshold": "0.25", "verbose": "yes", "languages": "go", "label": None}
    )
    assert (cfg.batch_rows, cfg.threshold, cfg.verbose, cfg.languages, cfg.label) == (2000, 0.25, True, ("go",), None)


def test_an_int_written_as_a_whole_float_is_taken():
    assert build_config(DemoConfig, {"batch_rows": 2000.0}).batch_rows == 2000
    assert build_config(DemoConfig, {"batch_rows": "2000.0"}).batch_rows == 2000


@pytest.mark.parametrize("value", [2.5, "2.5"])
def test_an_int_with_a_fraction_is_refused(value):
    with pytest.raises(StackcurateError, match=r"config key 'batch_rows' must be int, got "):
        build_config(DemoConfig, {"batch_rows": value})


def test_a_mapping_for_a_tuple_becomes_key_value_pairs():
    cfg = build_config(DemoConfig, {"languages": {"max_line": 100, "alpha": None}})
    assert cfg.languages == ("max_line=100", "alpha=null")


def test_an_unknown_key_suggests_the_closest_one():
    with pytest.raises(
        StackcurateError, match=r"^unknown DemoConfig key 'batch_row' \(did you mean 'batch_rows'\?\)$"
    ):
        build_config(DemoConfig, {"batch_row": 5})


def test_an_unknown_key_with_nothing_close_lists_the_valid_keys():
    with pytest.raises(StackcurateError, match=r"^unknown DemoConfig key 'zzz'; valid keys: batch_rows, threshold, "):
        build_config(DemoConfig, {"zzz": 5})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("batch_rows", "many", "config key 'batch_rows' must be int, got 'many'"),
        ("threshold", [1], "config key 'threshold' must be float, got [1]"),
        ("verbose", "maybe", "config key 'verbose' must be true or false, got 'maybe'"),
        ("batch_rows", None, "config key 'batch_rows' may not be null"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_one_line_error(key, value, message):
    with pytest.raises(StackcurateError) as exc:
        build_config(DemoConfig, {key: value})
    assert str(exc.value) == message


def test_a_value_the_config_rejects_is_a_one_line_error():
    with pytest.raises(StackcurateError, match=r"^invalid DemoConfig: batch_rows must be positive$"):
        build_config(DemoConfig, {"batch_rows": 0})


def test_path_fields_resolve_against_the_base_folder(tmp_path):
    cfg = build_config(DemoConfig, {"rules": "mine.yaml", "tables": ["a.csv", "/abs/b.csv"]}, base_dir=tmp_path)
    assert cfg.rules == str(tmp_path / "mine.yaml")
    assert cfg.tables == (str(tmp_path / "a.csv"), "/abs/b.csv")


@pytest.mark.parametrize("value", ["auto", "s3://bucket/rules.yaml"])
def test_keywords_and_uris_are_not_paths(tmp_path, value):
    assert build_config(DemoConfig, {"rules": value}, base_dir=tmp_path).rules == value


def test_resolve_paths_resolves_only_path_fields_and_keeps_unknown_keys(tmp_path):
    values = {"rules": "r.yaml", "label": "r.yaml", "other": "x"}
    assert resolve_paths(DemoConfig, values, tmp_path) == {
        "rules": str(tmp_path / "r.yaml"),
        "label": "r.yaml",
        "other": "x",
    }


def test_to_dict_gives_tuples_as_lists_and_output_settings_leave_out_how_to_run():
    cfg = DemoConfig()
    assert to_dict(cfg)["languages"] == ["python"]
    assert "threads" in to_dict(cfg)
    assert output_settings(cfg) == {k: v for k, v in to_dict(cfg).items() if k != "threads"}


def test_dump_yaml_keeps_the_field_order():
    assert dump_yaml(to_dict(DemoConfig())).splitlines()[:2] == ["batch_rows: 1000", "threshold: 0.5"]


def test_add_flags_gives_one_flag_per_field_and_only_given_ones_are_values():
    parser = argparse.ArgumentParser()
    add_flags(parser, DemoConfig)
    args = parser.parse_args(["--batch-rows", "5", "--no-verbose", "--languages", "go", "rust"])
    assert flag_values(args, DemoConfig) == {"batch_rows": "5", "verbose": False, "languages": ["go", "rust"]}
    assert build_config(DemoConfig, flag_values(args, DemoConfig)).languages == ("go", "rust")


def test_flag_help_ends_with_the_default_unless_it_says_it():
    parser = argparse.ArgumentParser()
    add_flags(parser, DemoConfig)
    helps = {a.dest: a.help for a in parser._actions}
    assert helps["batch_rows"] == "rows per table (default: 1000)"
    assert helps["languages"] == "languages to keep (default: python)"
    assert helps["threads"] == "threads (default: one per core)"
    assert helps["label"] == "a label"


def test_read_yaml_reads_a_mapping(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("batch_rows: 5\nlanguages: [go]\n")
    assert read_yaml(path) == {"batch_rows": 5, "languages": ["go"]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "config file {path} does not exist"),
        ("a: [1, 2\n", "{path} line 2 is not valid YAML: "),
        ("- a\n- b\n", "{path} must hold a mapping at the top level"),
    ],
)
def test_read_yaml_errors_are_one_line(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(StackcurateError) as exc:
        read_yaml(path)
    assert str(exc.value).startswith(message.format(path=Path(path)))
    assert "\n" not in str(exc.value)
