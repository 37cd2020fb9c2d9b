"""`nas.schema.Section`: a config section declared once as a frozen dataclass of settings,
checked when built and read from a dict with every error naming its field under the
prefix it is given."""

import dataclasses

import ml_collections
import pytest

from nas import schema


@dataclasses.dataclass(frozen=True)
class Part(schema.Section):
    count: int = schema.setting(2, schema.positive(), "how many")
    rate: float = schema.setting(1, schema.at_least(0, float), "how fast")
    names: dict[str, int] = schema.setting(dict, schema.Field(dict), "by name")
    low: int = schema.setting(0, schema.at_least(0))
    high: int = schema.setting(5, schema.at_least(0))

    def check_section(self, prefix: str) -> None:
        if self.high < self.low:
            raise ValueError(f"config field '{prefix}high' must be >= {prefix}low")


def test_a_section_is_built_from_its_declared_defaults():
    part = Part()
    assert (part.count, part.rate, part.names) == (2, 1.0, {})
    assert isinstance(part.rate, float)  # a number field takes an int, kept as a float
    assert Part.from_dict(None) == part == Part.from_dict({})
    assert schema.defaults(Part) == {"count": 2, "rate": 1, "names": {}, "low": 0, "high": 5}
    assert list(schema.checks(Part)) == ["count", "rate", "names", "low", "high"]
    Part().names["x"] = 1  # a default is a fresh value each time
    assert Part().names == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        part.count = 3  # type: ignore[misc]


def test_a_dict_or_config_dict_is_read_with_the_rest_at_default():
    assert Part.from_dict({"count": 4}) == Part(count=4)
    given = ml_collections.ConfigDict({"rate": 2.5, "names": {"a": 1}})
    assert Part.from_dict(given, "search.part.") == Part(rate=2.5, names={"a": 1})
    assert Part.from_dict({"count": 3}).to_dict() == {**schema.defaults(Part), "count": 3}
    part = Part(count=7)
    assert Part.from_dict(part) is part


@pytest.mark.parametrize("given, message", [
    ({"count": 0}, "config field 'search.part.count' must be an int > 0, got 0"),
    ({"rate": -1}, "config field 'search.part.rate' must be a number >= 0, got -1"),
    ({"colour": 1}, "config field 'search.part.colour' is unknown; expected one of count, "
                    "high, low, names, rate"),
    ({"low": 3, "high": 2}, "config field 'search.part.high' must be >= search.part.low"),
    (3, "config field 'search.part' must be a dict, got int"),
])
def test_every_error_names_its_field_under_the_prefix(given, message):
    with pytest.raises(ValueError) as e:
        Part.from_dict(given, "search.part.")
    assert str(e.value) == message


def test_a_section_built_directly_is_checked_too():
    with pytest.raises(ValueError, match=r"^config field 'count' must be an int > 0"):
        Part(count=0)
    with pytest.raises(ValueError, match=r"^config field 'high' must be >= low"):
        dataclasses.replace(Part(), low=9)
