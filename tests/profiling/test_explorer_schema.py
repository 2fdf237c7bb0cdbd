"""Our Parquet tables use Neuron Explorer's published schema: every field that is not marked as our
extension has Explorer's name, type and unit (checked against the published schema reference,
docs/notes/neuron-explorer-reference.md), and SchemaFields describes every field."""
from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from torch_neuronx.profiling import explorer_schema as es

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "notes" / "neuron-explorer-reference.md"
_ROW = re.compile(r"^\| `(\w+)` \| ([^|]+?) \| ([^|]*?) \| (Yes|No) \|")


def published() -> dict[str, dict[str, tuple[str, str, bool]]]:
    """Table -> field -> (type, unit, required) as the published reference lists them."""
    tables: dict[str, dict[str, tuple[str, str, bool]]] = {}
    current = None
    for line in REFERENCE.read_text().splitlines():
        heading = re.match(r"^#### `(\w+)`", line)
        if heading:
            current = tables.setdefault(heading.group(1), {})
        elif current is not None and (row := _ROW.match(line)):
            current[row.group(1)] = (row.group(2).strip(), row.group(3).strip(), row.group(4) == "Yes")
    return tables


def test_every_explorer_field_has_the_published_name_type_unit_and_requiredness():
    reference = published()
    assert "Instruction" in reference and "start_ts" in reference["Instruction"]
    checked = 0
    for table in (*es.TABLES.values(), es.SCHEMA_FIELDS):
        for field in table.fields:
            if field.extension:
                continue
            assert field.name in reference[table.name], f"{table.name}.{field.name} is not in Explorer's schema"
            kind, unit, required = reference[table.name][field.name]
            ours, fmt = {pa.int64(): ("integer", "int64"), pa.int32(): ("integer", "int32"),
                         pa.float64(): ("number", ""), pa.string(): ("string", ""), pa.bool_(): ("boolean", "")}[
                field.type]
            assert kind.startswith(ours) and fmt in kind, (table.name, field.name, kind, field.type)
            assert field.unit == unit, (table.name, field.name, unit)
            assert field.required == required, (table.name, field.name)
            checked += 1
    assert checked >= 50


def test_schema_fields_describes_every_field_with_its_origin():
    table = es.schema_fields()
    rows = table.to_pylist()
    declared = [(t.name, f.name) for t in (*es.TABLES.values(), es.SCHEMA_FIELDS) for f in t.fields]
    assert [(r["table_name"], r["field_name"]) for r in rows] == declared
    assert {r["field_origin"] for r in rows} <= {es.MEASURED, es.ESTIMATED, es.PROFILE}
    instruction = {r["field_name"]: r for r in rows if r["table_name"] == "Instruction"}
    start = instruction["start_ts"]
    assert start["field_unit"] == "nanoseconds" and start["field_origin"] == "estimated"
    assert instruction["kernel_name"]["field_extension"] and not instruction["engine"]["field_extension"]
    assert es.TABLES["Metadata"].schema.field("profile_schema_version").type == pa.string()
