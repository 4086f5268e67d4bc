"""The shipped `filters/` tables: where they are found, and how a config path `filters/<name>` reaches them."""

from pathlib import Path

from stackcurate.core.config import build_config
from stackcurate.core.paths import filters_dir
from stackcurate.stages.filter import FilterConfig
from stackcurate.stages.license import LicenseConfig

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_the_checkout_tables_under_an_editable_install():
    assert filters_dir() == ROOT / "filters"
    assert Path(LicenseConfig().permissive) == ROOT / "filters" / "licenses" / "permissive_v1.txt"


def test_a_filters_path_missing_beside_the_yaml_is_the_shipped_table(tmp_path):
    cfg = build_config(FilterConfig, {"rules": "filters/starcoder2_v1.yaml"}, base_dir=tmp_path)
    assert Path(cfg.rules) == filters_dir() / "starcoder2_v1.yaml"


def test_a_table_beside_the_yaml_wins(tmp_path):
    own = tmp_path / "filters" / "starcoder2_v1.yaml"
    own.parent.mkdir()
    own.write_text("rules: []\n")
    cfg = build_config(FilterConfig, {"rules": "filters/starcoder2_v1.yaml"}, base_dir=tmp_path)
    assert Path(cfg.rules) == own


def test_an_unknown_table_stays_where_the_yaml_said(tmp_path):
    for value in ("filters/nope.yaml", "rules/starcoder2_v1.yaml"):
        cfg = build_config(FilterConfig, {"rules": value}, base_dir=tmp_path)
        assert Path(cfg.rules) == tmp_path / value
