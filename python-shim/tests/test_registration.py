"""What Meltano sees of the package: entry points and setting definitions."""
from importlib.metadata import entry_points

import pytest

from meltano.core.setting_definition import SettingKind

from meltano_state_backend_clickhouse import settings
from meltano_state_backend_clickhouse.backend import SETTING_KEYS, ClickhouseStateStoreManager

pytestmark = pytest.mark.python_runtime  # entry points


def test_the_clickhouse_scheme_loads_our_manager():
    found = [ep for ep in entry_points(group="meltano.state_backends") if ep.name == "clickhouse"]
    assert len(found) == 1
    assert found[0].value == "meltano_state_backend_clickhouse.backend:ClickhouseStateStoreManager"
    assert found[0].load() is ClickhouseStateStoreManager


def test_every_setting_is_registered_as_a_string_for_the_bridge_to_check():
    loaded = [ep.load() for ep in entry_points(group="meltano.settings") if ep.value.startswith("meltano_state_backend_clickhouse")]
    by_name = {s.name: s for s in loaded}
    assert set(by_name) == {f"state_backend.clickhouse.{key}" for key in SETTING_KEYS}
    # Meltano's own conversion of a bad int or choice ends in a traceback: the bridge names setting and value instead.
    assert all(s.kind == SettingKind.STRING for s in loaded)
    assert by_name["state_backend.clickhouse.password"].sensitive
    assert all(s.env_specific for s in loaded)
    assert sorted(loaded, key=lambda s: s.name) == sorted(settings.ALL, key=lambda s: s.name)
